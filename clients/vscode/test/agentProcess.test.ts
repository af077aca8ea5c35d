// Starting the agent: a binary that is not there is a StartError that names the setting.
import { test } from "node:test";
import assert from "node:assert/strict";

import { checkBinary, launcher } from "../src/agentProcess.js";
import { StartError } from "../src/controller.js";

test("a missing binary is reported with the setting to change", async () => {
  await assert.rejects(checkBinary("talaria-surely-not-installed"), (error: unknown) => {
    assert.ok(error instanceof StartError);
    assert.match(error.message, /talaria-surely-not-installed/);
    assert.match(error.message, /talaria\.path/);
    return true;
  });
  await assert.rejects(checkBinary("/nowhere/talaria"), StartError);
  await checkBinary("sh");
});

test("the launcher refuses to start what is not there, before spawning", async () => {
  const launch = launcher({ path: "/nowhere/talaria", args: [], env: {} }, "/", () => {});
  await assert.rejects(async () => launch(), StartError);
});
