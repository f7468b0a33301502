// Package testlog holds what Vigil's tests use to capture logs.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a log sink that the goroutines of a supervisor, a server or a
// child's output copier may write while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
