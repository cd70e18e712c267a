package stack

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"time"
)

// PipelineOptions configures StartPipeline.
type PipelineOptions struct {
	// Env is given to every service: DATABASE_URL, KAFKA_BROKERS and, as
	// needed, KAFKA_PREFIX, REDIS_URL, DB_MAX_CONNS.
	Env map[string]string
	// Logs is the directory the services write their output to, one file
	// each (name.log).
	Logs string
	// Ready bounds how long each service may take to answer /readyz;
	// zero means 30 s.
	Ready time.Duration
}

// Pipeline is the three services running as `make dev` runs them:
// commerce-api, outbox-relay and product-consumers, each with an admin
// listener (/readyz, /metrics, /debug/pprof) on a loopback port of its own.
type Pipeline struct {
	API            string // commerce-api's base URL, http://host:port/api/v1
	APIAdmin       string // host:port of each service's admin listener
	RelayAdmin     string
	ConsumersAdmin string
	Procs          []*Proc // in start order: commerce-api, outbox-relay, product-consumers
}

// StartPipeline starts the services built into b, one after the other, each
// once the one before answers /readyz. On an error it stops those it
// started.
func (b *Binaries) StartPipeline(ctx context.Context, o PipelineOptions) (*Pipeline, error) {
	if o.Ready == 0 {
		o.Ready = 30 * time.Second
	}
	var addrs [4]string
	for i := range addrs {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	p := &Pipeline{API: "http://" + addrs[0] + "/api/v1", APIAdmin: addrs[1], RelayAdmin: addrs[2], ConsumersAdmin: addrs[3]}
	for _, s := range []struct {
		bin, admin string
		env        map[string]string
	}{
		{"commerce-api", p.APIAdmin, map[string]string{"HTTP_ADDR": addrs[0]}},
		{"outbox-relay", p.RelayAdmin, nil},
		{"product-consumers", p.ConsumersAdmin, nil},
	} {
		env := maps.Clone(o.Env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, s.env)
		env["ADMIN_ADDR"] = s.admin
		proc, err := b.Start(s.bin, env, filepath.Join(o.Logs, s.bin+".log"))
		if err != nil {
			p.Stop(10 * time.Second)
			return nil, err
		}
		p.Procs = append(p.Procs, proc)
		wctx, cancel := context.WithTimeout(ctx, o.Ready)
		err = WaitHTTP(wctx, "http://"+s.admin+"/readyz")
		cancel()
		if err != nil {
			err = fmt.Errorf("%s: %w\n%s", s.bin, err, proc.Log(2000))
			p.Stop(10 * time.Second)
			return nil, err
		}
	}
	return p, nil
}

// Stop stops the services in the reverse order of their start, each with
// SIGTERM and grace to finish.
func (p *Pipeline) Stop(grace time.Duration) {
	for i := len(p.Procs) - 1; i >= 0; i-- {
		p.Procs[i].Stop(grace)
	}
}
