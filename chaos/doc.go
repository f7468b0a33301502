// Package chaos is Vigil's reliability and security suite (RELIABILITY.md):
// chaos scenarios that run `vigil serve` processes, real worker processes
// and private redis-server processes, kill and stop them, and count what
// happened to every job (a ledger keyed by task id, kept in a Redis of its
// own), to every process (by pid list) and to the restart counters; and
// hostile-input tests against a listening admin server.
//
// The package has no code of its own: it is all tests, gated by the
// environment so that the default suite (`make test`, miniredis) skips
// them. VIGIL_TEST_REDIS_URL set (`make test-redis`) runs the short
// variants; VIGIL_CHAOS=1 (`make chaos`) runs every scenario at full size.
// Each test starts its own redis-server processes, so it touches nothing
// of the Redis that VIGIL_TEST_REDIS_URL names.
//
// It must not be imported.
package chaos
