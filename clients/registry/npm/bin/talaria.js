#!/usr/bin/env node
// npm's `talaria` and `talaria-agent`: the agent, so that `npx talaria-agent acp` speaks the
// Agent Client Protocol on stdio.
"use strict";
require("./launch.js").run("talaria");
