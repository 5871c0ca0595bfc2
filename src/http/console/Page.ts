/** `/`: the console's page: the header with its navigation, and `main` where app.js mounts a page. */
import { html } from "./Asset.js"

export const page = html(
  "index.html",
  String.raw`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nativegen</title>
<link rel="icon" href="/console/icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/console/style.css">
<script type="module" src="/console/app.js"></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
<span class="brand">nativegen</span>
<nav aria-label="Pages">
<ul>
<li><a href="#/status">Status</a></li>
<li><a href="#/chat">Chat</a></li>
<li><a href="#/decide">Decide</a></li>
<li><a href="#/models">Models</a></li>
</ul>
</nav>
<span class="connection" id="connection" role="status"></span>
</header>
<main id="main" tabindex="-1"></main>
<noscript><p>The console needs JavaScript.</p></noscript>
</body>
</html>
`
)
