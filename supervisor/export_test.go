package supervisor

// IllegalTransitions is how many worker moves the state table did not
// allow (see step.to): every test's supervisor must end with none.
func (s *Supervisor) IllegalTransitions() int64 { return s.illegal.Load() }

// Scans is how many claim steps read every lease (see needScan).
func (s *Supervisor) Scans() int64 { return s.scans.Load() }
