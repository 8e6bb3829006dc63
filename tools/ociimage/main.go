// Command ociimage builds infergate's container image without Docker: an OCI image layout,
// as one tar file (an "oci-archive": `skopeo copy oci-archive:infergate.tar docker://...`,
// `podman load`, `docker load` from Docker 25), holding a static binary built beforehand,
// on no base image.
//
// The image is the Dockerfile's: the binary at /infergate as the entrypoint, user
// 65532:65532 (nonroot, as distroless names it), port 8000, a CA bundle when -ca names one
// (for HTTPS upstreams), /tmp writable for a read-only root filesystem's emptyDir. The same
// inputs give the same bytes, hence the same digest: every timestamp is -created (default
// $SOURCE_DATE_EPOCH, else the Unix epoch), files are root-owned with fixed modes, entries
// sorted. Labels and manifest annotations carry OCI's source, revision, version and created.
//
//	go build -trimpath -ldflags "-s -w -X main.version=$V" -o infergate ./runtime
//	go run ./tools/ociimage -binary infergate -version $V -revision $(git rev-parse HEAD) -ca /etc/ssl/certs/ca-certificates.crt -o infergate.tar
//
// Written on github.com/google/go-containerregistry (the library behind crane and ko), which
// assembles and writes the image; only the layer's tar and the archive's tar are written here,
// so that their timestamps and owners are fixed.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options describe the image.
type Options struct {
	Binary   []byte // the static infergate binary
	CA       []byte // a PEM bundle of CA certificates, or nil
	Version  string
	Revision string // the source's commit
	Source   string // the source's URL
	Created  time.Time
	Arch     string // GOARCH of the binary
}

// The image's user: nonroot, as distroless names it.
const uid = 65532

func main() {
	var o Options
	bin := flag.String("binary", "", "the static infergate binary (go build -trimpath with CGO_ENABLED=0)")
	out := flag.String("o", "infergate.tar", "the OCI archive to write")
	ca := flag.String("ca", "", "a PEM CA bundle to put at /etc/ssl/certs/ca-certificates.crt")
	created := flag.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "the image's time, Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	flag.StringVar(&o.Version, "version", "dev", "the version (org.opencontainers.image.version)")
	flag.StringVar(&o.Revision, "revision", "", "the source's commit (org.opencontainers.image.revision)")
	flag.StringVar(&o.Source, "source", "https://github.com/infergate/infergate", "the source's URL (org.opencontainers.image.source)")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "the binary's architecture")
	flag.Parse()
	if err := run(o, *bin, *ca, *created, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(o Options, bin, ca, created, out string) error {
	var err error
	if bin == "" {
		return errors.New("-binary is required")
	}
	if o.Binary, err = os.ReadFile(bin); err != nil {
		return err
	}
	if ca != "" {
		if o.CA, err = os.ReadFile(ca); err != nil {
			return err
		}
	}
	secs := int64(0)
	if created != "" {
		if secs, err = strconv.ParseInt(created, 10, 64); err != nil {
			return fmt.Errorf("-created: %w", err)
		}
	}
	o.Created = time.Unix(secs, 0).UTC()
	img, err := Image(o)
	if err != nil {
		return err
	}
	return WriteArchive(img, o, out)
}

// Annotations are the OCI annotations (and labels) of the image o describes.
func Annotations(o Options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "infergate",
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.created":  o.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

// Image assembles the image.
func Image(o Options) (v1.Image, error) {
	layerTar, err := rootfs(o)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("the layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.Created}, CreatedBy: "tools/ociimage: the static binary, a CA bundle, /etc/passwd, /tmp"}})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.Created}
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Config.Entrypoint = []string{"/infergate"}
	cf.Config.Cmd = nil
	cf.Config.User = strconv.Itoa(uid) + ":" + strconv.Itoa(uid)
	cf.Config.WorkingDir = "/tmp"
	cf.Config.ExposedPorts = map[string]struct{}{"8000/tcp": {}}
	cf.Config.Env = []string{"PATH=/"}
	if o.CA != nil {
		cf.Config.Env = append(cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	}
	cf.Config.Labels = Annotations(o)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("the config: %w", err)
	}
	return mutate.Annotations(img, Annotations(o)).(v1.Image), nil
}

// rootfs is the layer's tar: every entry root-owned, timestamped o.Created, sorted.
func rootfs(o Options) ([]byte, error) {
	type entry struct {
		name string
		mode int64
		dir  bool
		data []byte
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/tmp:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "infergate", mode: 0o755, data: o.Binary},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	if o.CA != nil {
		entries = append(entries, entry{name: "etc/ssl/", mode: 0o755, dir: true}, entry{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			entry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: o.CA})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: o.Created, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteArchive writes img as an OCI image layout in one tar file at out, its entries sorted and
// timestamped o.Created.
func WriteArchive(img v1.Image, o Options, out string) error {
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("the layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.Version})); err != nil {
		return fmt.Errorf("writing the image: %w", err)
	}
	var files []string
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && path != dir {
			files = append(files, path)
		}
		return err
	}); err != nil {
		return err
	}
	sort.Strings(files)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, path := range files {
		rel, _ := filepath.Rel(dir, path)
		info, err := os.Stat(path)
		if err != nil {
			return errors.Join(err, f.Close())
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: o.Created, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: info.Size()}
		if info.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return errors.Join(err, f.Close())
		}
		if !info.IsDir() {
			data, err := os.ReadFile(path)
			if err == nil {
				_, err = tw.Write(data)
			}
			if err != nil {
				return errors.Join(err, f.Close())
			}
		}
	}
	return errors.Join(tw.Close(), f.Close())
}
