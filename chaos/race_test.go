//go:build race

package chaos_test

// raceEnabled: the tests run under -race, so vigil is built with it too
// (a data race in a `vigil serve` under chaos then fails the test).
const raceEnabled = true
