package queue

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// A handler that must run alone waits for the running ones, and those
// arriving after it wait for it; a wait ends with its context.
func TestHandlerGate(t *testing.T) {
	g := newHandlerGate(2)
	ctx := context.Background()
	r1, err := g.enter(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	aloneIn := make(chan func())
	go func() {
		r, err := g.enter(ctx, true)
		if err != nil {
			t.Error(err)
		}
		aloneIn <- r
	}()
	// Until the waiter holds the turn and the free slot.
	for deadline := time.Now().Add(5 * time.Second); len(g.turn) != 1 || len(g.slots) != 2; {
		if time.Now().After(deadline) {
			t.Fatal("the handler to run alone never started waiting")
		}
		runtime.Gosched()
	}
	// The third waits behind the one waiting to run alone.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := g.enter(short, false); err == nil {
		t.Fatal("a handler entered while one waits to run alone")
	}
	select {
	case <-aloneIn:
		t.Fatal("ran alone beside another handler")
	default:
	}
	r1()
	alone := <-aloneIn
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := g.enter(short2, false); err == nil {
		t.Fatal("a handler entered beside one running alone")
	}
	alone()
	r2, err := g.enter(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	r3, err := g.enter(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	r2()
	r3()
}
