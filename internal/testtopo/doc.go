// Package testtopo starts real Redis topologies with replicas for Vigil's
// failover tests, from the redis-server and redis-cli binaries, on
// loopback ports the caller gives (the failover suite uses 6431-6459):
//
//   - StartSentinel: a master, one replica and one sentinel
//     (`redis-server --sentinel`) watching them;
//   - StartCluster: a 6-node Redis Cluster, 3 masters with one replica each
//     (`redis-cli --cluster create … --cluster-replicas 1`).
//
// Each process is started by the test and stopped by its pid when the test
// ends; faults are SIGKILL of one process (Kill) and, for Sentinel, a
// manual `SENTINEL FAILOVER`. The wait helpers poll the external processes
// (not goroutines of the test) and return when the new master answers.
//
// It is a leaf for tests only: it imports go-redis and the standard
// library.
package testtopo
