package backpressure

// PendingCountCap exposes pendingCountCap to the external tests.
func (b *Backpressure) PendingCountCap() int { return b.pendingCountCap() }

// CountCap exposes a plan's count cap to the external tests.
func (p Plan) CountCap() int { return p.countCap }
