package doctor

// zabitable.go, the layouts of the internal/abi types the ABI check compares
// with the kernel's BTF, is rendered from internal/abi by a test.

//go:generate go test -run TestDoctorABITable -update .
