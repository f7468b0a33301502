package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/vigil-dev/vigil/openapi"
)

// openapiCmd writes the admin API's OpenAPI documents (openapi.yaml,
// openapi.json, openapi-3.0.yaml), generated from the code, into a folder.
func openapiCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vigil openapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "openapi", "folder to write the documents into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("openapi: unexpected argument %q", fs.Arg(0))
	}
	if err := openapi.Write(*dir); err != nil {
		return fmt.Errorf("openapi: %w", err)
	}
	for _, f := range openapi.Files {
		fmt.Fprintf(stdout, "wrote %s/%s\n", *dir, f)
	}
	return nil
}
