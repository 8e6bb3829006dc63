// Command cshared is infergate as a C shared library, for the Python binding in python/infergate:
//
//	go build -buildmode=c-shared -o python/infergate/libinfergate.so ./bindings/cshared
//
// (python3 python/build.py runs exactly that). The C functions it exports are in export.go; they
// wrap bindings/embed. Built without cgo it is an empty program, so CGO_ENABLED=0 builds of the
// whole module still succeed.
package main

func main() {}
