// Swagger UI's initializer, kept in a file of its own (no inline script) so
// that the page runs under a same-origin Content-Security-Policy. The spec
// URL is relative to the page (<prefix>/docs), so it works wherever the
// admin server is mounted.
window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: "StandaloneLayout"
  });
};
