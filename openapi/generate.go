package openapi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vigil-dev/vigil/server"
)

// Files are the generated documents by file name.
var Files = []string{"openapi.yaml", "openapi.json", "openapi-3.0.yaml"}

// Generate renders the documents from the server's code.
func Generate() (map[string][]byte, error) {
	spec := server.Spec()
	y, err := spec.YAML()
	if err != nil {
		return nil, fmt.Errorf("render openapi.yaml: %w", err)
	}
	j, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render openapi.json: %w", err)
	}
	y30, err := spec.DowngradeYAML()
	if err != nil {
		return nil, fmt.Errorf("render openapi-3.0.yaml: %w", err)
	}
	return map[string][]byte{
		"openapi.yaml":     y,
		"openapi.json":     append(j, '\n'),
		"openapi-3.0.yaml": y30,
	}, nil
}

// Write generates the documents into dir.
func Write(dir string) error {
	docs, err := Generate()
	if err != nil {
		return err
	}
	for _, name := range Files {
		if err := os.WriteFile(filepath.Join(dir, name), docs[name], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
