// Package deploy holds the deployment of the suite: Kubernetes manifests
// (k8s/, kustomize), the Prometheus scrape configuration and the Grafana
// dashboard. Its tests check those files, docker-compose.yml, the Dockerfile
// and docs/configuration.md against the code and the running services.
package deploy
