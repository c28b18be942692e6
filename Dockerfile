# efakit-plugin: static binaries on a distroless base, for linux/amd64 and
# linux/arm64 (the platforms of tools/image; TestDockerfileAgrees):
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/efakit-plugin:TAG --push .
#
# The build stage runs on the builder's own platform and Go cross-compiles
# for each target (no emulation); TARGETOS and TARGETARCH are buildx's
# automatic arguments. The image's user is non-root; the Helm chart runs it
# as root with every capability dropped, only to write the kubelet's
# root-owned directories.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
# The binaries are the plugin module's (plugin/), which builds against the
# library at the root of the same tree (its replace directive).
WORKDIR /src
COPY go.mod go.sum ./
COPY plugin/go.mod plugin/go.sum ./plugin/
RUN cd plugin && go mod download
COPY . .
WORKDIR /src/plugin
ARG VERSION=dev
ARG TARGETOS TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/efakit-plugin ./cmd/efakit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/efakit-plugin /out/efakit /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/efakit-plugin"]
