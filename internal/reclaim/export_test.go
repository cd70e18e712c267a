package reclaim

// SetBeforeCommit installs the hook that runs between republish and commit.
func (r *Reclaimer) SetBeforeCommit(f func(topic string, partition int32) error) { r.beforeCommit = f }
