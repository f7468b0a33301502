// Package testledger is the job ledger of Vigil's reliability tests (the
// chaos suite and the fault explorer): worker processes write every run of
// every task to a Redis of its own, apart from the Redis under test, so
// that what handlers did survives whatever the tests do to that one
// (outages, restarts, lost data). Writer is the worker's side, Reader the
// test's.
//
// Keys, under a prefix (one per scenario or seed):
//
//	runs         hash task → handler starts
//	runners      hash task → comma-separated pids whose handler started it
//	completions  hash task → handler successes
//	completers   hash task → comma-separated pids that completed it
//	first_done   hash task → when it first completed (Unix ms)
//	failures     hash task → handler ends that were not a success
//	last_end     hash task → how its last handler run ended (ok, error,
//	             canceled, deadline)
//	owners       hash task → pid whose handler is inside it now
//	procs        hash pid → "<component> <host>" the process worked for
//	exits        hash pid → how the process left on its own (clean:<code>,
//	             or the planned exit it was told to make)
//	violations   list: a handler that started while another live
//	             process's handler was still inside the same task
//
// An owner entry goes when its handler returns, whatever the outcome; a
// killed process leaves it behind, and a later start finds it but also
// finds that process gone (by /proc, zombies counting as gone), which is
// no violation. A process with no exits entry did not end on its own
// terms: it was killed.
//
// It is a leaf for tests and test binaries only.
package testledger

// Environment of a worker that writes to a ledger.
const (
	EnvURL    = "CHAOS_LEDGER_URL" // the ledger's Redis
	EnvPrefix = "CHAOS_LEDGER"     // its key prefix
)

// Outcomes of a handler run, as End records them.
const (
	OutcomeOK       = "ok"
	OutcomeError    = "error"
	OutcomeCanceled = "canceled"
	OutcomeDeadline = "deadline"
)
