package server

// SetHistoryScanMax lowers the most stream entries one history request
// reads, until the returned function restores it (tests are not parallel).
func SetHistoryScanMax(n int) (restore func()) {
	old := historyScanMax
	historyScanMax = n
	return func() { historyScanMax = old }
}
