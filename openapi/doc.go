// Package openapi keeps the admin API's OpenAPI documents in git, generated
// from package server's code (`vigil openapi`, `make openapi`):
// openapi.yaml and openapi.json (3.1) and openapi-3.0.yaml (for tools that
// read only 3.0, such as oapi-codegen, which generates client/ from it).
// Its tests fail when the committed files drift from the code, and drive a
// live server through the generated client.
//
// It must not be imported by the server (it imports the server).
package openapi
