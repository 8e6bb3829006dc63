package cuda

// Info describes the driver and devices a process sees.
type Info struct {
	DriverVersion int // as cuDriverGetVersion reports it: 12080 is 12.8
	Devices       []DeviceInfo
	CUBLAS        string // the cuBLAS library opened, or "" with CUBLASErr saying why not
	CUBLASErr     error
}

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Ordinal      int
	Name         string
	Memory       int64 // bytes
	Capability   [2]int
	SMs          int
	MemoryClock  int // kHz
	MemoryBusBit int
}
