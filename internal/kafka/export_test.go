package kafka

import "context"

// CheckWith is Check through one client library only ("sarama" or
// "franz-go"), so that a test sees each library's failures explained.
func (s Settings) CheckWith(ctx context.Context, client string) error {
	if client == "sarama" {
		return s.check(ctx, nil, nil, s.probeSarama)
	}
	return s.check(ctx, nil, s.probeKgo)
}

// CheckObserved is Check telling unreached of each broker it found
// unreachable before it tries again.
func (s Settings) CheckObserved(ctx context.Context, unreached func(error)) error {
	return s.check(ctx, unreached, s.probeKgo, s.probeSarama)
}
