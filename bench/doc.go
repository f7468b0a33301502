// Package bench holds the benchmark harness: bench/run runs every figure
// of BENCHMARKS.md against a private redis-server (`make bench`, or
// `make bench-short` for the one-iteration form CI runs). The benchmarks
// themselves live beside the code they measure (supervisor, queue, server).
// bench/sseclients is the client swarm of server's BenchmarkEventFanout:
// thousands of SSE clients in a process of their own.
package bench
