package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestImage builds the gateway's binary and its image twice from the same inputs, and opens
// the archive as a registry tool would: the same bytes both times (a reproducible digest); an
// OCI layout whose index names one image manifest; its config's entrypoint, user, port and
// labels, the manifest's OCI annotations; the layer's files, root-owned; and the binary in it
// runs -version.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary is built for linux and run here")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "infergate")
	const version = "v0.0.0-imagetest"
	// Built as the other tests build it (a release adds -trimpath and CGO_ENABLED=0, which
	// would compile every package again: two minutes of CI for the same check).
	out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+version, "-o", bin, "../../runtime").CombinedOutput()
	require.NoError(t, err, "%s", out)
	o := Options{Version: version, Revision: "0123456789abcdef", Source: "https://github.com/infergate/infergate",
		Created: time.Unix(1764374400, 0).UTC(), Arch: runtime.GOARCH, CA: []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")}
	o.Binary, err = os.ReadFile(bin)
	require.NoError(t, err)
	var archives [2][]byte
	for i := range archives {
		img, err := Image(o)
		require.NoError(t, err)
		path := filepath.Join(dir, "img"+string(rune('a'+i))+".tar")
		require.NoError(t, WriteArchive(img, o, path))
		archives[i], err = os.ReadFile(path)
		require.NoError(t, err)
	}
	assert.Equal(t, sha256.Sum256(archives[0]), sha256.Sum256(archives[1]), "the same inputs, the same archive")

	files := untar(t, archives[0])
	assert.JSONEq(t, `{"imageLayoutVersion":"1.0.0"}`, string(files["oci-layout"]))
	var index struct {
		Manifests []struct {
			MediaType   string            `json:"mediaType"`
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	require.NoError(t, json.Unmarshal(files["index.json"], &index))
	require.Len(t, index.Manifests, 1)
	assert.Equal(t, "application/vnd.oci.image.manifest.v1+json", index.Manifests[0].MediaType)
	assert.Equal(t, version, index.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	blob := func(digest string) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		require.True(t, ok, "blob %s", digest)
		require.Equal(t, digest, "sha256:"+hexSum(b), "a blob's name is its digest")
		return b
	}
	var manifest struct {
		Config      struct{ Digest, MediaType string }
		Layers      []struct{ Digest, MediaType string }
		Annotations map[string]string
	}
	require.NoError(t, json.Unmarshal(blob(index.Manifests[0].Digest), &manifest))
	assert.Equal(t, "application/vnd.oci.image.config.v1+json", manifest.Config.MediaType)
	want := map[string]string{"org.opencontainers.image.source": o.Source, "org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.version": version, "org.opencontainers.image.created": "2025-11-29T00:00:00Z"}
	for k, v := range want {
		assert.Equal(t, v, manifest.Annotations[k], k)
	}
	var config struct {
		Architecture, OS string
		Config           struct {
			Entrypoint   []string
			User         string
			WorkingDir   string
			Env          []string
			ExposedPorts map[string]struct{}
			Labels       map[string]string
		} `json:"config"`
	}
	require.NoError(t, json.Unmarshal(blob(manifest.Config.Digest), &config))
	assert.Equal(t, []string{"/infergate"}, config.Config.Entrypoint)
	assert.Equal(t, "65532:65532", config.Config.User, "not root")
	assert.Contains(t, config.Config.ExposedPorts, "8000/tcp")
	assert.Contains(t, config.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	assert.Equal(t, [2]string{"linux", runtime.GOARCH}, [2]string{config.OS, config.Architecture})
	for k, v := range want {
		assert.Equal(t, v, config.Config.Labels[k], "label "+k)
	}

	require.Len(t, manifest.Layers, 1)
	assert.Equal(t, "application/vnd.oci.image.layer.v1.tar+gzip", manifest.Layers[0].MediaType)
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	require.NoError(t, err)
	layer, err := io.ReadAll(zr)
	require.NoError(t, err)
	tr := tar.NewReader(bytes.NewReader(layer))
	var names []string
	var inside []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		assert.Zero(t, h.Uid+h.Gid, "%s is root-owned", h.Name)
		assert.True(t, h.ModTime.Equal(o.Created), "%s's time", h.Name)
		if h.Name == "infergate" {
			assert.EqualValues(t, 0o755, h.Mode)
			inside, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
		if h.Name == "tmp/" {
			assert.EqualValues(t, 0o1777, h.Mode, "writable /tmp")
		}
	}
	assert.Equal(t, []string{"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "infergate", "tmp/"}, names)
	extracted := filepath.Join(dir, "extracted")
	require.NoError(t, os.WriteFile(extracted, inside, 0o755))
	got, err := exec.Command(extracted, "-version").CombinedOutput()
	require.NoError(t, err, "%s", got)
	assert.Equal(t, "infergate "+version+"\n", string(got))
}

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			files[h.Name], err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 64)
	for _, c := range s {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestDockerfileMatches: the Dockerfile's image and this tool's agree on what a deployment
// relies on: the entrypoint, the user, the working directory and the port.
func TestDockerfileMatches(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	final := string(b)[strings.LastIndex(string(b), "\nFROM "):]
	img, err := Image(Options{Binary: []byte("x"), Created: time.Unix(0, 0), Arch: "amd64"})
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	entry, _ := json.Marshal(cf.Config.Entrypoint)
	for _, line := range []string{"ENTRYPOINT " + string(entry), "USER " + cf.Config.User, "WORKDIR " + cf.Config.WorkingDir, "EXPOSE 8000"} {
		assert.Contains(t, final, "\n"+line+"\n", "the Dockerfile's final stage")
	}
}
