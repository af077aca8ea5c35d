// An SDK client attached to a session of a `talaria serve`, for suites beside this one (the
// web client's three-client test): the official ACP TypeScript SDK over a `ws` WebSocket,
// initialized as `name`, keeping every update of the session in order and every question it
// is asked (answered at once with "allow once"). Here so that its imports resolve from this
// folder's node_modules.
import { WebSocket } from "ws";
import { client, methods, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";

/** Connects to `server` (from `startServe`) as `name`; resolves once initialized. */
export async function sdkClient(server, name) {
  const updates = [];
  const asked = [];
  const app = client({ name })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      asked.push(params);
      return { outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === "allow_once").optionId } };
    })
    .onNotification(methods.client.session.update, ({ params }) => updates.push(params.update));
  const stream = createWebSocketStream(server.url.replace(/^http/, "ws"), {
    WebSocket,
    headers: { Authorization: `Bearer ${server.token}` },
  });
  let finish;
  const done = new Promise((ok) => (finish = ok));
  let ready;
  const initialized = new Promise((ok) => (ready = ok));
  const running = app.connectWith(stream, async (ctx) => {
    await ctx.request(methods.agent.initialize, {
      protocolVersion: PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: { name, version: "1" },
    });
    ready(ctx);
    await done;
  });
  const ctx = await Promise.race([initialized, running.then(() => Promise.reject(new Error("the SDK client ended")))]);
  return {
    ctx,
    updates,
    asked,
    /** Sends `_session/attach` (or another request the SDK does not name). */
    request: (method, params) => ctx.request(method, params),
    async close() {
      finish();
      await running;
    },
  };
}
