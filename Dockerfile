# efakit-plugin: a static binary on a distroless base. The image's user is
# non-root; the Helm chart runs it as root with every capability dropped,
# only to write the kubelet's root-owned directories.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/efakit-plugin ./cmd/efakit-plugin \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/efakit ./cmd/efakit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/efakit-plugin /out/efakit /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/efakit-plugin"]
