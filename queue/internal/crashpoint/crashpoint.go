// Package crashpoint is a test seam of package queue: queue calls Hit at
// named steps of work whose crash safety its tests prove (a publish's
// commit), and a test's worker process (queue/internal/testjobworker) may
// set At to SIGKILL itself there. Nothing sets it in production.
package crashpoint

// At, if set, is called at each point; when it returns true the caller
// stops dead there, as if the process had died (in-process tests).
var At func(point string) bool

// Hit reports whether the caller must stop dead at point.
func Hit(point string) bool { return At != nil && At(point) }
