package main

import (
	"time"

	"github.com/loopers/commerce-pipeline/internal/procstat"
)

// cpuSample is a process's CPU time at one moment.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// cpuSampler reads a process's CPU time every 20 ms while it runs, so that
// the CPU of a window the process reports afterwards (from its first record
// to its last) can be read off: the JVM's start-up and the group join are
// left out, for both sides alike.
type cpuSampler struct {
	pid     int
	stop    chan struct{}
	done    chan struct{}
	samples []cpuSample
}

func sampleCPU(pid int) *cpuSampler {
	s := &cpuSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if c, err := procstat.ProcessCPU(pid); err == nil {
				s.samples = append(s.samples, cpuSample{time.Now(), c})
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops sampling; call it before the process exits.
func (s *cpuSampler) finish() {
	close(s.stop)
	<-s.done
	if c, err := procstat.ProcessCPU(s.pid); err == nil {
		s.samples = append(s.samples, cpuSample{time.Now(), c})
	}
}

// between is the CPU time used from `from` to `to`, from the samples
// around them (the last sample at or before from, the first at or after
// to): at most 20 ms wider than the window on each side.
func (s *cpuSampler) between(from, to time.Time) time.Duration {
	if len(s.samples) == 0 {
		return 0
	}
	lo, hi := s.samples[0], s.samples[len(s.samples)-1]
	for _, x := range s.samples {
		if !x.at.After(from) {
			lo = x
		}
	}
	for i := len(s.samples) - 1; i >= 0; i-- {
		if !s.samples[i].at.Before(to) {
			hi = s.samples[i]
		}
	}
	return hi.cpu - lo.cpu
}
