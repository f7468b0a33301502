# Vigil in a container: `docker build -t vigil .`
#
# The server listens on 0.0.0.0:8080 here so that a published port reaches it.
# Listening beyond loopback needs an admin token: set VIGIL_TOKEN. Without one,
# operator actions are accepted only from loopback clients, which requests
# through a published port are not. For example:
#   docker run -e VIGIL_TOKEN=... -e VIGIL_REDIS_URL=redis://redis:6379/0 -p 8080:8080 vigil
# Without VIGIL_REDIS_URL, vigil serve refuses to start; VIGIL_REDIS_URL=embedded
# runs an in-memory Redis whose state is lost when the container stops.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first: this layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/vigil ./cmd/vigil

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/vigil /vigil
USER nonroot
EXPOSE 8080
ENTRYPOINT ["/vigil"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
