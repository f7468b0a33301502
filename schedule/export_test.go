package schedule

import (
	"context"
	"time"
)

// TickIDForTest is tickID.
func TickIDForTest(name string, tick time.Time) string { return tickID(name, tick) }

// Step runs one step of the scheduler's loop and returns when it would
// look again.
func (s *Scheduler) Step(ctx context.Context) time.Time { return s.step(ctx) }

// BeforeFire sets a hook called between a schedule's plan and each fire.
func (s *Scheduler) BeforeFire(f func(name string, tick time.Time)) { s.beforeFire = f }

// OnStep sets a hook called by the loop after each step.
func (s *Scheduler) OnStep(f func(next time.Time)) { s.onStep = f }
