module github.com/efakit/efakit

go 1.26.8
