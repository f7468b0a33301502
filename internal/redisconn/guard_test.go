package redisconn

import (
	"context"
	"testing"
	"time"
)

func TestFailoverGuardEvents(t *testing.T) {
	g := &failoverGuard{master: "vigil", cancel: func() {}}
	held := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.held != nil
	}
	// Another master's failover holds nothing.
	g.event("+failover-state-send-slaveof-noone", "slave 127.0.0.1:7001 127.0.0.1 7001 @ other 127.0.0.1 7000")
	if held() {
		t.Fatal("held for another master")
	}
	g.event("+failover-state-send-slaveof-noone", "slave 127.0.0.1:6432 127.0.0.1 6432 @ vigil 127.0.0.1 6431")
	if !held() {
		t.Fatal("not held after the promotion began")
	}
	// A command waits while held: its context ends first here.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.wait(ctx); err == nil {
		t.Fatal("wait returned while held")
	}
	// The switch of another master releases nothing; an abort of this one does.
	g.event("+switch-master", "other 127.0.0.1 7000 127.0.0.1 7001")
	if !held() {
		t.Fatal("released by another master's switch")
	}
	g.event("-failover-abort-not-elected", "master vigil 127.0.0.1 6431")
	if held() {
		t.Fatal("still held after the failover was aborted")
	}
	if err := g.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The switch releases after guardSettle.
	g.event("+selected-slave", "slave 127.0.0.1:6432 127.0.0.1 6432 @ vigil 127.0.0.1 6431")
	done := make(chan error, 1)
	go func() { done <- g.wait(context.Background()) }()
	g.event("+switch-master", "vigil 127.0.0.1 6431 127.0.0.1 6432")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a held command did not go on after +switch-master")
	}
}
