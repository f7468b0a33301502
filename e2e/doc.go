// Package e2e holds the browser test of the dashboard (`make e2e`): it
// builds vigil, starts `vigil demo`, and drives the page at / in headless
// Chromium through chromedp. Its tests carry the e2e build tag, so that
// `make test` needs no browser.
package e2e
