// Package failover holds Vigil's failover suite (TestFailover): two `vigil
// serve` hosts, a pool of chaosworker processes writing every run to a
// ledger in a Redis of its own, jobs enqueued through both admin APIs
// every 100 ms, and a Redis failover in the middle: Sentinel (SENTINEL
// FAILOVER, master SIGKILL) and a Redis Cluster with replicas (SIGKILL of
// the master of the pool's queue, or of vigil:events), started from
// redis-server binaries by internal/testtopo on ports 6431-6459.
//
// It measures, per run: the time from the new master to Vigil working
// again (API and workers), healthy workers killed, crashes counted, API
// errors, and jobs accepted / done once / done twice / lost. The tests
// run only with VIGIL_FAILOVER=1 (make test-failover); RELIABILITY.md
// holds the figures.
package failover
