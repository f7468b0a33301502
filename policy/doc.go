// Package policy decides what happens after a worker crashes: restart after
// an exponential backoff, or give up and mark the worker failed.
//
// It is pure: no I/O, no goroutines and no clock of its own. Callers pass the
// moment of the crash and the randomness for jitter, and store the State it
// returns (package health keeps it in Redis).
package policy
