package reclaim

// SetBeforeCommit makes f run after each partition's records were
// republished and before its offset is committed; an error stops the
// commit, as a crash at that point would.
func (r *Reclaimer) SetBeforeCommit(f func(topic string, partition int32) error) {
	r.commits = hookedCommits{next: r.commits, before: f}
}

// hookedCommits runs before ahead of each commit of next.
type hookedCommits struct {
	next   committer
	before func(topic string, partition int32) error
}

func (h hookedCommits) commitForward(k tp, offset int64) (int64, error) {
	if err := h.before(k.topic, k.partition); err != nil {
		return 0, err
	}
	return h.next.commitForward(k, offset)
}
