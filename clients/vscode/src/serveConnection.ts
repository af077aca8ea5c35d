// Attaching to a session of a `talaria serve`: the link the web client shares
// (`http://HOST:PORT/#token=TOKEN&session=SESSION_ID`) read into its parts, and an ACP stream
// over a WebSocket to the server (the `ws` package: the extension's Node may have no
// WebSocket of its own) for the session controller. No VS Code.
import { WebSocket } from "ws";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";

import { StartError, type AgentTarget, type Launcher } from "./controller.js";

/** How long the server has to accept the socket. */
const HANDSHAKE_TIMEOUT_MS = 15_000;

/** Where a session runs: the server's address, its token, and the session's id. */
export type AttachLink = { url: string; token: string; sessionId: string };

/**
 * Reads a link `http://HOST:PORT/#token=TOKEN&session=SESSION_ID` (also `https:`, `ws:`,
 * `wss:`, and with `/acp` as its path). Throws a StartError saying what is missing.
 */
export function parseAttachLink(text: string): AttachLink {
  let parsed: URL;
  try {
    parsed = new URL(text.trim());
  } catch {
    throw new StartError(`Not a link: “${text.trim()}”. Paste the link a Talaria server shows: http://HOST:PORT/#token=TOKEN&session=SESSION_ID`);
  }
  const fragment = new URLSearchParams(parsed.hash.replace(/^#/, ""));
  const token = fragment.get("token") ?? "";
  const sessionId = fragment.get("session") ?? "";
  if (!token || !sessionId) {
    throw new StartError(
      `The link names no ${token ? "session" : "token"}: it should end in #token=TOKEN&session=SESSION_ID.`,
    );
  }
  return { url: serverAddress(parsed.href), token, sessionId };
}

/** A server address as given (`http://127.0.0.1:8765`, with or without `/acp`): its origin. */
export function serverAddress(text: string): string {
  let parsed: URL;
  try {
    parsed = new URL(text.trim());
  } catch {
    throw new StartError(`Not a server address: “${text.trim()}” (e.g. http://127.0.0.1:8765).`);
  }
  if (!["http:", "https:", "ws:", "wss:"].includes(parsed.protocol)) {
    throw new StartError(`A Talaria server is reached over http(s) or ws(s), not ${parsed.protocol}`);
  }
  return parsed.origin;
}

/** The WebSocket address of the server's ACP endpoint. */
export function socketAddress(url: string): string {
  return `${serverAddress(url).replace(/^http/, "ws")}/acp`;
}

/**
 * `ws`'s WebSocket closing with 1000 (normal) when no code is given: the server ends the
 * connection on a normal close, and keeps it (and its control of a session) for its
 * reconnect window on any other.
 */
class NormallyClosingWebSocket extends WebSocket {
  override close(code = 1000, reason?: string | Buffer): void {
    super.close(code, reason);
  }
}

/**
 * Connects to the server at `link.url` with its token; what the controller runs over. The
 * stream's end (the socket closed, by either side) is the target's exit.
 */
export function serveLauncher(link: AttachLink, log: (text: string) => void): Launcher {
  return async (): Promise<AgentTarget> => {
    const address = socketAddress(link.url);
    log(`connecting to ${address}\n`);
    let closed!: (why: string) => void;
    const exited = new Promise<string>((resolve) => (closed = resolve));
    let socket: WebSocket | undefined;
    let stream: ReturnType<typeof createWebSocketStream> | undefined;
    const opened = new Promise<void>((resolve, reject) => {
      class Watched extends NormallyClosingWebSocket {
        constructor(url: string, protocols?: string | string[], options?: { headers?: Record<string, string> }) {
          // A server that does not answer (a dropped packet, a wrong port behind a firewall)
          // is given up on rather than waited for.
          super(url, protocols, { ...options, handshakeTimeout: HANDSHAKE_TIMEOUT_MS });
          socket = this;
          this.once("open", () => resolve());
          this.once("unexpected-response", (_request, response) => {
            reject(new StartError(refusal(address, response.statusCode ?? 0)));
            this.terminate();
          });
          this.once("error", (error) => reject(new StartError(`Cannot reach ${address}: ${error.message}`)));
          this.once("close", (code, reason) => {
            const why = `the connection closed (${code}${reason.length ? `: ${reason.toString()}` : ""})`;
            log(`${address}: ${why}\n`);
            closed(why);
          });
        }
      }
      stream = createWebSocketStream(address, {
        WebSocket: Watched,
        headers: { Authorization: `Bearer ${link.token}` },
      });
    });
    await opened;
    if (!stream || !socket) throw new StartError(`Cannot reach ${address}`);
    const open = socket;
    return { target: stream, exited, kill: () => open.close(1000) };
  };
}

/** Why the server refused the socket, for the user. */
function refusal(address: string, status: number): string {
  switch (status) {
    case 401:
      return `${address} refused the token (401): copy the link again, or the token from the server's $TALARIA_HOME/serve.token.`;
    case 403:
      return `${address} refused this client (403): the server checks the Host it is reached by (see its --allow-origin).`;
    case 503:
      return `${address} has as many connections as it takes (503).`;
    default:
      return `${address} refused the connection (${status}).`;
  }
}
