//go:build !linux

package main

import "errors"

func pageOut(addr, n uintptr) error { return errors.New("reclaiming pages needs Linux") }
