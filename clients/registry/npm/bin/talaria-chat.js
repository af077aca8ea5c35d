#!/usr/bin/env node
// npm's `talaria-chat`: the terminal client, which starts the `talaria` beside it.
"use strict";
require("./launch.js").run("talaria-chat");
