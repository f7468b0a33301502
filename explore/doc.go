// Package explore is Vigil's fault explorer (RELIABILITY.md, "Fault
// explorer"): in the manner of FoundationDB's simulator and TigerBeetle's
// VOPR, each seed derives a small cluster (2–3 hosts, pools, policy) and a
// schedule of faults and operator actions, runs it against real parts —
// vigilhost processes (one Supervisor each, its own host id, instance and
// Redis client, behind a fault proxy of its own), real worker processes
// (chaosworker, writing every job run to a ledger in a Redis apart), a real
// redis-server or miniredis — or a replicated Redis (a Sentinel topology,
// a Cluster with replicas) that the schedule fails over — jobs enqueued
// through asynq all along — and
// checks the invariants every 50 ms from /proc and Redis, then at the end
// of the seed. A violation prints the seed, the schedule so far and the
// evidence; running the seed again replays the same schedule.
//
// It is a room of its own: it may import any package of the module and no
// package imports it. `make explore` runs it (cmd/explore).
package explore
