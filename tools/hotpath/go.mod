module github.com/infergate/infergate/tools/hotpath

go 1.26.7

require (
	github.com/infergate/infergate v0.0.0
	github.com/valyala/fasthttp v1.78.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/infergate/infergate => ../..
