package queue

// SetTestHooks sets the worker's test seams: onSkip is called when
// backpressure refuses a dequeue, onDequeue after each dequeue with whether
// it got a task.
func SetTestHooks(cfg *WorkerConfig, onSkip func(), onDequeue func(got bool)) {
	cfg.onDequeueSkip, cfg.onDequeue = onSkip, onDequeue
}

// DequeueScriptSource is the worker's dequeue script.
const DequeueScriptSource = vigilDequeueSource
