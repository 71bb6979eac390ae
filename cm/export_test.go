package cm

// CloseIdleDevices closes the device contexts rdma_cm IDs opened and no ID
// uses any more, which the package otherwise keeps for the process, so
// that leak checks see only what the tests left behind.
var CloseIdleDevices = closeIdleDevices
