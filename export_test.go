package backpressure

// PendingCountCap exposes pendingCountCap to the external tests.
func (b *Backpressure) PendingCountCap() int { return b.pendingCountCap() }
