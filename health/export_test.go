package health

import "context"

// RunOnce is one step of Run's loop (a beat, or none during a window).
func (h *Heartbeater) RunOnce(ctx context.Context) error { return h.once(ctx) }
