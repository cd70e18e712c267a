// Command healthcheck is the probe that container health checks run: it GETs
// one URL and exits 0 when the answer is 2xx, 1 otherwise. The service images
// are distroless (no shell, no curl), so this static binary is copied into
// each of them.
//
//	healthcheck http://127.0.0.1:8080/readyz
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

// timeout stays below the health checks' own timeout, so a hung service is
// reported as unhealthy by this probe rather than killed by the engine.
const timeout = 3 * time.Second

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: healthcheck URL")
		os.Exit(2)
	}
	if err := probe(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

func probe(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
