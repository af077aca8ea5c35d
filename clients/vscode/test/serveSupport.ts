// A real `talaria serve` for the attach tests: the scripted mock LLM (the harness crate's
// `talaria-mock-llm`) as its model, a home of its own, its address and token; and a client of
// the official SDK over WebSocket that opens the session the extension attaches to; a link
// between the extension and the server that stops reading on demand (the extension then
// falls behind). The
// binaries are the workspace's debug builds (`cargo build --workspace --bins`, as
// tests/run-all.sh does first), or TALARIA_BIN and TALARIA_MOCK_BIN.
import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";
import { WebSocket } from "ws";
import {
  client,
  methods,
  PROTOCOL_VERSION,
  type ClientConnection,
  type RequestPermissionRequest,
  type RequestPermissionResponse,
  type SessionUpdate,
} from "@agentclientprotocol/sdk";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";

import { socketAddress } from "../src/serveConnection.js";

const root = resolve(process.cwd(), "../.."); // clients/vscode (npm run)
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, "target");
const talariaBin = process.env.TALARIA_BIN ?? join(targetDir, "debug", "talaria");
const mockBin = process.env.TALARIA_MOCK_BIN ?? join(targetDir, "debug", "talaria-mock-llm");

function needed(path: string, what: string): void {
  if (!existsSync(path)) {
    assert.fail(`${what} is not at ${path}: build it (cargo build --workspace --bins) or name it with TALARIA_BIN / TALARIA_MOCK_BIN`);
  }
}

/** The scripted mock LLM: its address, its script, what it was asked. */
export class MockLlm {
  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
  ) {}

  static async start(): Promise<MockLlm> {
    needed(mockBin, "the mock LLM (talaria-mock-llm)");
    const child = spawn(mockBin, [], { stdio: ["pipe", "pipe", "inherit"] });
    const line = await new Promise<string>((ok, fail) => {
      createInterface({ input: child.stdout! }).once("line", ok);
      child.once("error", fail);
    });
    return new MockLlm(child, `http://127.0.0.1:${(JSON.parse(line) as { port: number }).port}`);
  }

  async script(replies: unknown[]): Promise<void> {
    const response = await fetch(`${this.url}/_mock/script`, { method: "POST", body: JSON.stringify(replies) });
    assert.equal(response.status, 200);
  }

  /** The bodies of the requests the agent sent, as text. */
  async requests(): Promise<string[]> {
    const recorded = (await (await fetch(`${this.url}/_mock/requests`)).json()) as { body: unknown }[];
    return recorded.map((r) => JSON.stringify(r.body));
  }

  stop(): void {
    this.child.stdin?.end();
  }
}

/** A `talaria serve --listen 127.0.0.1:0` on a fresh home, the mock as its model. */
export class Serve {
  private constructor(
    private readonly child: ChildProcess,
    private readonly exited: Promise<unknown>,
    readonly home: string,
    readonly url: string,
    readonly token: string,
  ) {}

  /** `mock`: the mock LLM, or its address (without `/v1`); `args`: more of `serve`'s. */
  static async start(mock: MockLlm | string, args: string[] = []): Promise<Serve> {
    const mockUrl = typeof mock === "string" ? mock : mock.url;
    needed(talariaBin, "the talaria binary");
    const home = mkdtempSync(join(tmpdir(), "talaria-vscode-serve-"));
    const child = spawn(talariaBin, ["serve", "--listen", "127.0.0.1:0", ...args], {
      stdio: ["ignore", "pipe", "inherit"],
      env: {
        PATH: process.env.PATH,
        HOME: home,
        TALARIA_HOME: join(home, "talaria"),
        OPENAI_BASE_URL: `${mockUrl}/v1`,
        OPENAI_API_KEY: "vscode-key",
        TALARIA_MODEL: "mock-model",
        TALARIA_LOG: "warn",
        // A title from the model would add a request to every script.
        TALARIA_TITLES: "off",
      },
    });
    const exited = new Promise((ok) => child.once("exit", (code, signal) => ok(code ?? signal)));
    const line = await new Promise<string>((ok, fail) => {
      createInterface({ input: child.stdout! }).once("line", ok);
      child.once("exit", (code) => fail(new Error(`talaria serve exited ${code}`)));
    });
    const url = /listening on (\S+)/.exec(line)?.[1];
    assert.ok(url, `talaria serve said where it listens: ${line}`);
    const token = readFileSync(join(home, "talaria", "serve.token"), "utf8").trim();
    return new Serve(child, exited, home, url, token);
  }

  /** The link the web client shares for `sessionId`. */
  link(sessionId: string): string {
    return `${new URL(this.url).origin}/#token=${this.token}&session=${sessionId}`;
  }

  async stop(): Promise<unknown> {
    this.child.kill("SIGTERM");
    const code = await this.exited;
    rmSync(this.home, { recursive: true, force: true });
    return code;
  }
}

/**
 * Another client of the session (as the web client or a second editor would be): the SDK
 * over WebSocket, its updates kept, its permission questions answered at once (`answers`
 * set) or left waiting until withdrawn (counted in `withdrawn`).
 */
export class OtherClient {
  readonly updates: SessionUpdate[] = [];
  readonly asked: RequestPermissionRequest[] = [];
  withdrawn = 0;
  answers = false;
  /** The questions waiting for this client (`answers` unset), by tool call. */
  private readonly waiting = new Map<string, (response: RequestPermissionResponse) => void>();
  clientId?: string;

  private constructor(readonly connection: ClientConnection) {}

  static async connect(serve: Serve, name: string): Promise<OtherClient> {
    let self: OtherClient | undefined;
    const app = client({ name })
      .onRequest(methods.client.session.requestPermission, ({ params, signal }) => self!.onPermission(params, signal))
      .onNotification(methods.client.session.update, ({ params }) => {
        self!.updates.push(params.update);
      })
      .onNotification("_talaria/connection", (params) => params, () => {});
    const stream = createWebSocketStream(socketAddress(serve.url), {
      WebSocket,
      headers: { Authorization: `Bearer ${serve.token}` },
    });
    self = new OtherClient(app.connect(stream));
    const init = await self.connection.agent.request(methods.agent.initialize, {
      protocolVersion: PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: { name, version: "1" },
    });
    const attach = (init._meta as { sessionAttach?: { clientId?: string } } | null | undefined)?.sessionAttach;
    self.clientId = attach?.clientId;
    return self;
  }

  private onPermission(params: RequestPermissionRequest, signal: AbortSignal): Promise<RequestPermissionResponse> {
    this.asked.push(params);
    if (this.answers) {
      const allow = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
      return Promise.resolve({ outcome: { outcome: "selected", optionId: allow.optionId } });
    }
    return new Promise((resolve) => {
      this.waiting.set(params.toolCall.toolCallId, (response) => {
        this.waiting.delete(params.toolCall.toolCallId);
        resolve(response);
      });
      signal.addEventListener("abort", () => {
        this.withdrawn += 1;
        this.waiting.delete(params.toolCall.toolCallId);
        resolve({ outcome: { outcome: "cancelled" } });
      });
    });
  }

  /** Answers the waiting question of `toolCallId` with its allow-once option. */
  allow(toolCallId: string): void {
    const asked = this.asked.find((q) => q.toolCall.toolCallId === toolCallId);
    const answer = this.waiting.get(toolCallId);
    assert.ok(asked && answer, `a question waits on ${toolCallId}`);
    const option = asked.options.find((o) => o.kind === "allow_once") ?? asked.options[0];
    answer({ outcome: { outcome: "selected", optionId: option.optionId } });
  }

  /** The text of the agent's chunks so far. */
  answerText(): string {
    return this.updates
      .filter((u) => u.sessionUpdate === "agent_message_chunk")
      .map((u) => (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text" ? u.content.text : ""))
      .join("");
  }

  /** The rosters this client was told, in order. */
  rosters(): { clients: { clientId: string; name?: string }[]; controller?: string | null }[] {
    return this.updates
      .map((u) => (u as { _meta?: Record<string, unknown> | null })._meta?.["talaria/attachment"])
      .filter((r): r is { clients: { clientId: string }[]; controller?: string | null } => !!r);
  }

  close(): void {
    this.connection.close();
  }
}

/**
 * A TCP proxy to a `serve` that stops reading what the server sends when told (what the
 * client sends still goes): the server's output to the client piles up as for a client that
 * stalled. Requests name the server's own address (it refuses another Host).
 */
export class StallingLink {
  /** Each connection's two sockets: to the server, to the client. */
  private readonly links = new Map<net.Socket, net.Socket>();
  private reading = true;

  private constructor(
    private readonly proxy: net.Server,
    /** The server's address through the link (`http://127.0.0.1:PORT`). */
    readonly url: string,
  ) {}

  static async to(serve: Serve): Promise<StallingLink> {
    const target = new URL(serve.url);
    let link: StallingLink | undefined;
    const proxy = net.createServer((down) => link?.connect(down, target));
    await new Promise<void>((ok) => proxy.listen(0, "127.0.0.1", ok));
    const { port } = proxy.address() as net.AddressInfo;
    link = new StallingLink(proxy, `http://127.0.0.1:${port}`);
    return link;
  }

  private connect(down: net.Socket, target: URL): void {
    const up = net.connect(Number(target.port), target.hostname);
    this.links.set(up, down);
    if (!this.reading) up.pause();
    const proxied = new URL(this.url).host;
    let upgraded = false;
    down.on("data", (data: Buffer) => {
      if (upgraded) return up.write(data);
      return up.write(Buffer.from(data.toString("latin1").replaceAll(proxied, target.host), "latin1"));
    });
    up.on("data", (data: Buffer) => {
      upgraded ||= data.toString("latin1").startsWith("HTTP/1.1 101");
      down.write(data);
    });
    const destroy = () => {
      this.links.delete(up);
      up.destroy();
      down.destroy();
    };
    for (const socket of [up, down]) {
      socket.on("error", destroy);
      socket.on("close", destroy);
    }
  }

  /** Stops reading what the server sends. */
  stall(): void {
    this.reading = false;
    for (const up of this.links.keys()) up.pause();
  }

  /** Reads again. */
  resume(): void {
    this.reading = true;
    for (const up of this.links.keys()) up.resume();
  }

  close(): void {
    for (const [up, down] of this.links) {
      up.destroy();
      down.destroy();
    }
    this.proxy.close();
  }
}

/** Waits until `check` holds (checked every 20 ms, for up to 15 s). */
export async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 750; i += 1) {
    if (check()) return;
    await new Promise((ok) => setTimeout(ok, 20));
  }
  assert.fail(`timed out waiting for ${what}`);
}
