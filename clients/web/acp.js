// A small ACP client over WebSocket for the browser: JSON-RPC requests with answers by id,
// the agent's requests and notifications to handlers, the token as the `bearer.` subprotocol
// (a browser's WebSocket cannot set headers), and a dropped socket taken back with
// `?connection=ID&after=N` so no message of the agent is lost or repeated.

/** An ACP connection to `talaria serve`. */
export class AcpConnection {
  /**
   * @param {string} url the server's `/acp` address (ws: or wss:)
   * @param {string} token the bearer token
   */
  constructor(url, token) {
    this.url = url;
    this.token = token;
    this.nextId = 1;
    /** @type {Map<number, {resolve: Function, reject: Function}>} */
    this.pending = new Map();
    /** @type {Map<string, Function>} */
    this.requestHandlers = new Map();
    /** @type {Map<string, Function>} */
    this.notificationHandlers = new Map();
    this.connectionId = null;
    /** Agent messages received: what a reconnection says it has. */
    this.received = 0;
    this.closed = false;
    this.onStatus = () => {};
    this.outbox = [];
  }

  /** Opens the socket; resolves once it is open. */
  open() {
    return new Promise((resolve, reject) => {
      const query = this.connectionId
        ? `?connection=${encodeURIComponent(this.connectionId)}&after=${this.received}`
        : "";
      const socket = new WebSocket(this.url + query, ["acp", `bearer.${this.token}`]);
      this.socket = socket;
      socket.onopen = () => {
        this.opened = true;
        this.onStatus("connected");
        for (const text of this.outbox.splice(0)) socket.send(text);
        resolve();
      };
      socket.onerror = () => reject(new Error("the connection was refused (wrong token or address?)"));
      socket.onmessage = (event) => this.receive(String(event.data));
      socket.onclose = (event) => this.dropped(event);
    });
  }

  /** The socket closed: unless on purpose, comes back to the same connection. */
  dropped(event) {
    // Never opened (refused): nothing to come back to.
    if (this.closed || !this.opened) return;
    if (event.code === 1000 && event.reason === "the connection has ended") {
      this.closed = true;
      this.onStatus("ended");
      return;
    }
    this.onStatus("reconnecting");
    setTimeout(() => {
      this.open().catch(() => this.dropped({ code: 0, reason: "" }));
    }, 500);
  }

  receive(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (message.method === "_talaria/connection") {
      this.connectionId = message.params.connectionId;
      return;
    }
    this.received += 1;
    if (message.method && message.id !== undefined) {
      this.answerRequest(message);
    } else if (message.method) {
      this.notificationHandlers.get(message.method)?.(message.params);
    } else {
      const waiting = this.pending.get(message.id);
      if (!waiting) return;
      this.pending.delete(message.id);
      if (message.error) waiting.reject(Object.assign(new Error(message.error.message), message.error));
      else waiting.resolve(message.result);
    }
  }

  async answerRequest(message) {
    const handler = this.requestHandlers.get(message.method);
    if (!handler) {
      this.send({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: `${message.method} is not supported` } });
      return;
    }
    try {
      this.send({ jsonrpc: "2.0", id: message.id, result: await handler(message.params, message.id) });
    } catch (error) {
      this.send({ jsonrpc: "2.0", id: message.id, error: { code: -32603, message: String(error.message ?? error) } });
    }
  }

  send(message) {
    const text = JSON.stringify(message);
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(text);
    else this.outbox.push(text);
  }

  /** Sends a request; resolves with its result. */
  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.send({ jsonrpc: "2.0", id, method, params });
    });
  }

  notify(method, params) {
    this.send({ jsonrpc: "2.0", method, params });
  }

  onRequest(method, handler) {
    this.requestHandlers.set(method, handler);
    return this;
  }

  onNotification(method, handler) {
    this.notificationHandlers.set(method, handler);
    return this;
  }

  /** Drops the socket without ending the connection (what a network failure does). */
  interrupt() {
    this.socket?.close(4000, "interrupted");
  }

  close() {
    this.closed = true;
    this.socket?.close(1000, "done");
  }
}
