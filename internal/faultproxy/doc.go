// Package faultproxy is a TCP proxy in front of one Redis server (miniredis
// or redis-server) that injects the faults a network and a server produce:
// every live connection cut (Cut), new connections closed at once
// (Refuse), no byte forwarded either way as with a paused server (Stall),
// and a lost reply: a command that ran whose answer never reaches the
// client (DropReply).
//
// It understands just enough of RESP to pair each command with its reply
// (pipelining, RESP2 and RESP3, push frames); a connection that enters a
// mode where that pairing ends (SUBSCRIBE, MONITOR, an inline command) is
// passed through byte for byte from then on.
//
// It is a leaf for tests and the fault explorer: it imports nothing of
// Vigil and must not be imported by production code.
package faultproxy
