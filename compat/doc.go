// Package compat is the asynq compatibility suite
// (TestAsynqCompatibility): a user's plain asynq Client, Inspector and
// Scheduler, which import nothing of Vigil, against a running `vigil
// serve` on a real Redis, checking that both sides tell the same story
// about every task state, pause, timeout, unknown task type and finished
// job, each point both ways. It runs only with VIGIL_TEST_REDIS_URL (make
// test-redis); each check prints a RESULT line with the asynq figure and
// the Vigil figure side by side.
package compat
