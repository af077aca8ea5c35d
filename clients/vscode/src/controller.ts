// The ACP session controller: starts the agent (through a launcher), initializes, opens,
// lists, loads and closes sessions, sends prompts, cancels, answers permission questions
// from the cards, and serves the agent's requests through an editor host. Or, connected to
// a `talaria serve`, attaches to a session running there (`_session/attach`), follows it,
// takes control, and detaches; when the server detaches it for falling behind, it says so
// and attaches again. It keeps the chat state and reports which items changed.
// Knows nothing of VS Code, so it runs under tests.
import {
  client,
  methods,
  PROTOCOL_VERSION,
  RequestError,
  type AgentApp,
  type ClientConnection,
  type ContentBlock,
  type CreateElicitationRequest,
  type CreateElicitationResponse,
  type ElicitationSchema,
  type CreateTerminalRequest,
  type CreateTerminalResponse,
  type InitializeResponse,
  type KillTerminalRequest,
  type ReadTextFileRequest,
  type ReadTextFileResponse,
  type ReleaseTerminalRequest,
  type RequestPermissionRequest,
  type RequestPermissionResponse,
  type SessionConfigOption,
  type SessionInfo,
  type Stream,
  type TerminalOutputRequest,
  type TerminalOutputResponse,
  type WaitForTerminalExitRequest,
  type WaitForTerminalExitResponse,
  type WriteTextFileRequest,
} from "@agentclientprotocol/sdk";

import { createHash } from "node:crypto";

import {
  addNotice,
  addQuestion,
  addStop,
  addUser,
  ALL_ITEMS,
  answered,
  applyUpdate,
  askPermission,
  detachedHere,
  emptyState,
  questionAnswered,
  setRoster,
  terminalOutput,
  truncateBefore,
  type ChatState,
} from "./chatState.js";
import { checkAnswer, describeAnswer, formFields, type FormField } from "./form.js";

/** What the editor does for the agent: files and terminals. */
export interface EditorHost {
  readTextFile(params: ReadTextFileRequest): Promise<ReadTextFileResponse>;
  writeTextFile(params: WriteTextFileRequest): Promise<void>;
  /** Starts a command; `onOutput` hears its output as it comes. */
  createTerminal(params: CreateTerminalRequest, onOutput?: (text: string) => void): Promise<CreateTerminalResponse>;
  terminalOutput(params: TerminalOutputRequest): Promise<TerminalOutputResponse>;
  waitForTerminalExit(params: WaitForTerminalExitRequest): Promise<WaitForTerminalExitResponse>;
  killTerminal(params: KillTerminalRequest): Promise<void>;
  releaseTerminal(params: ReleaseTerminalRequest): Promise<void>;
  /** Offers to open `url` (an MCP server's sign-in) in the browser; whether the user went. */
  openAddress(message: string, url: string): Promise<boolean>;
}

/** A started agent: the stream to it (or an in-process agent), and how it ends. */
export type AgentTarget = {
  target: Stream | AgentApp;
  /** Resolves with the exit code (or the signal's name) when the agent process ends. */
  exited: Promise<string>;
  kill(): void;
};

/** Starts the agent; throws (a `StartError`, say) when it cannot. */
export type Launcher = () => AgentTarget | Promise<AgentTarget>;

/** A start that failed before any protocol (e.g. the binary is missing). */
export class StartError extends Error {}

/** Settings command shown on start failures. */
export const OPEN_SETTINGS = "talaria.openSettings";
/** The command that takes control of an attached session (on an observer's refused prompt). */
export const TAKE_CONTROL = "talaria.takeControl";

/** The command that attaches to a session of a `talaria serve` (it asks for the link). */
export const ATTACH = "talaria.attach";

/** The error a `talaria serve` answers an observer's prompt (or other controller's request). */
export const MUST_TAKE_CONTROL = -32003;

/** How many times a window that fell behind attaches again before it gives up. */
const CATCH_UP_TRIES = 3;

/** What a window that fell behind says at the top of the session it is shown again. */
export const FELL_BEHIND =
  "This window fell behind the session: updates came faster than it read them, so the server stopped " +
  "sending it any. It attached again: the whole session is shown below, then live.";

/** Whether `error` is a `talaria serve`'s answer to a client it detached (it fell behind). */
function isDetached(error: unknown): boolean {
  if (!(error instanceof RequestError) || error.code !== MUST_TAKE_CONTROL) return false;
  return (error.data as { talaria?: { detached?: unknown } } | undefined)?.talaria?.detached === true;
}

/** The answer of `_session/attach`. */
type Attached = {
  sessionId: string;
  role: "controller" | "observer";
  clientId?: string;
  configOptions?: SessionConfigOption[] | null;
  _meta?: { "talaria/attachment"?: { clients?: { clientId: string; name?: string; role: string }[]; controller?: string | null } } | null;
};

type Listener = (changed: string[]) => void;

export class SessionController {
  state: ChatState = emptyState();
  sessionId?: string;
  agentInfo?: InitializeResponse;
  private connection?: ClientConnection;
  private agent?: AgentTarget;
  private starting?: Promise<boolean>;
  private readonly permissions = new Map<string, (response: RequestPermissionResponse) => void>();
  /** Questions waiting for the user: their fields and how to answer the agent. */
  private readonly questions = new Map<
    string,
    { fields: FormField[]; resolve: (response: CreateElicitationResponse) => void }
  >();
  private readonly listeners: Listener[] = [];
  /** The session to resume after the agent crashed. */
  private resumeId?: string;
  /** The role to attach in again after a lost connection (the one this window had). */
  private rejoinAs?: "controller" | "observer";
  /** Attaching again after falling behind (one catch-up at a time). */
  private catchingUp = false;
  /** Prompts waiting for the running turn, in order. */
  private readonly queued: { blocks: ContentBlock[]; shown: string; attachments: string[] }[] = [];

  /**
   * With `attachTo`, the launcher connects to a `talaria serve` and the controller attaches
   * to that session (as an observer) instead of opening one.
   */
  constructor(
    private readonly launch: Launcher,
    private readonly host: EditorHost,
    private readonly cwd: string,
    private readonly log: (line: string) => void = () => {},
    private readonly attachTo?: string,
  ) {}

  /** Whether this controller follows a session attached to in a `talaria serve`. */
  get attached(): boolean {
    return this.attachTo !== undefined;
  }

  onChange(listener: Listener): void {
    this.listeners.push(listener);
  }

  private changed(ids: string[]): void {
    for (const listener of this.listeners) listener(ids);
  }

  get running(): boolean {
    return this.connection !== undefined;
  }

  get acceptsImages(): boolean {
    return this.agentInfo?.agentCapabilities?.promptCapabilities?.image === true;
  }

  get canList(): boolean {
    if (this.attached) return false;
    return !!this.agentInfo?.agentCapabilities?.sessionCapabilities?.list;
  }

  /** Whether the agent takes messages into a running turn (`_session/steering`). */
  get canSteer(): boolean {
    const meta = this.agentInfo?._meta as { steering?: { supported?: unknown } } | null | undefined;
    return meta?.steering?.supported === true;
  }

  /** Whether the agent rewinds to a message (`_session/rewind`), files too (`restoreFiles`). */
  get canRewind(): boolean {
    const meta = this.agentInfo?._meta as { sessionRewind?: { supported?: unknown } } | null | undefined;
    return meta?.sessionRewind?.supported === true;
  }

  get canLoad(): boolean {
    if (this.attached) return false;
    return this.agentInfo?.agentCapabilities?.loadSession === true;
  }

  /** Starts the agent and opens a session, once; later calls wait for the same start. */
  ensureStarted(): Promise<boolean> {
    if (this.connection && this.sessionId) return Promise.resolve(true);
    this.starting ??= this.start().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private buildClient() {
    const app = client({ name: "talaria-vscode" })
      .onRequest(methods.client.session.requestPermission, ({ params, signal }) => this.onPermission(params, signal))
      .onNotification(methods.client.session.update, ({ params }) => {
        if (params.sessionId !== this.sessionId) return;
        this.changed(applyUpdate(this.state, params.update));
        if (this.attached && detachedHere(this.state, params.update)) void this.catchUp();
      })
      .onRequest(methods.client.fs.readTextFile, ({ params }) => this.host.readTextFile(params))
      .onRequest(methods.client.fs.writeTextFile, async ({ params }) => {
        await this.host.writeTextFile(params);
        return {};
      })
      .onRequest(methods.client.elicitation.create, ({ params, signal }) => this.onQuestion(params, signal))
      .onRequest(methods.client.terminal.create, async ({ params }) => {
        // Output before the id is known waits for it.
        let id: string | undefined;
        const early: string[] = [];
        const response = await this.host.createTerminal(params, (text) => {
          if (id === undefined) early.push(text);
          else this.changed(terminalOutput(this.state, id, text));
        });
        id = response.terminalId;
        if (early.length) this.changed(terminalOutput(this.state, id, early.join("")));
        return response;
      })
      .onRequest(methods.client.terminal.output, ({ params }) => this.host.terminalOutput(params))
      .onRequest(methods.client.terminal.waitForExit, ({ params }) => this.host.waitForTerminalExit(params))
      .onRequest(methods.client.terminal.kill, async ({ params }) => {
        await this.host.killTerminal(params);
        return {};
      })
      .onRequest(methods.client.terminal.release, async ({ params }) => {
        await this.host.releaseTerminal(params);
        return {};
      });
    // A `talaria serve` names the connection first (what a reconnect would name).
    if (this.attached) app.onNotification("_talaria/connection", (params) => params, () => {});
    return app;
  }

  private async start(): Promise<boolean> {
    if (!this.connection) {
      try {
        this.agent = await this.launch();
      } catch (error) {
        this.fail(error instanceof Error ? error.message : String(error));
        return false;
      }
      const agent = this.agent;
      const app = this.buildClient();
      const target = agent.target;
      const connection = "writable" in target ? app.connect(target) : app.connect(target);
      this.connection = connection;
      agent.exited.then((code) => this.onExit(agent, code));
      try {
        this.agentInfo = await connection.agent.request(methods.agent.initialize, {
          protocolVersion: PROTOCOL_VERSION,
          // An attached session runs on the server's machine: its files and commands are
          // not this editor's, so they are not offered.
          clientCapabilities: this.attached
            ? { elicitation: { form: {}, url: {} } }
            : {
                fs: { readTextFile: true, writeTextFile: true },
                terminal: true,
                // The agent's questions (`clarify`, MCP servers') are shown as forms in the chat.
                elicitation: { form: {}, url: {} },
              },
          clientInfo: { name: "talaria-vscode", version: "0.1.0" },
        });
      } catch (error) {
        this.fail(describe(error));
        this.stopAgent();
        return false;
      }
    }
    return this.attachTo !== undefined ? this.attachSession(this.attachTo) : this.openSession();
  }

  /**
   * Attaches to `sessionId` as an observer (or, after a lost connection, in the role it had):
   * the session so far comes as updates before the answer, then every update live. After a
   * lost connection the chat is shown again whole.
   */
  private async attachSession(sessionId: string): Promise<boolean> {
    const connection = this.connection;
    if (!connection) return false;
    const role = this.rejoinAs ?? "observer";
    this.rejoinAs = undefined;
    this.state = emptyState();
    this.state.attachment = { role: "observer", clients: [] };
    this.sessionId = sessionId;
    this.changed([ALL_ITEMS]);
    try {
      const result = await connection.agent.request<Attached>("_session/attach", {
        sessionId,
        role,
        historyPolicy: "full",
      });
      this.took(result);
      this.state.configOptions = result.configOptions ?? [];
      this.changed(["*"]);
      return true;
    } catch (error) {
      this.sessionId = undefined;
      this.changed([addNotice(this.state, "error", `Could not attach to session ${sessionId}: ${describe(error)}`)]);
      return false;
    }
  }

  /** Takes in an attach's answer: this window's id and role, and the roster. */
  private took(result: Attached): void {
    const attachment = (this.state.attachment ??= { role: "observer", clients: [] });
    if (result.clientId) attachment.clientId = result.clientId;
    const roster = result._meta?.["talaria/attachment"];
    if (roster) setRoster(this.state, roster);
    attachment.role = result.role === "controller" ? "controller" : "observer";
  }

  /**
   * The server detached this window from the session because it fell behind: it says so and
   * attaches again as an observer, which replays the session before it answers; the chat is
   * emptied first, so nothing shows twice. One catch-up at a time (a `note`, such as a prompt
   * that was not sent, joins the one running), a few tries; when none works, the chat as it
   * was comes back with why.
   */
  private async catchUp(note?: string): Promise<void> {
    const { sessionId, connection } = this;
    if (!sessionId || !connection) return;
    if (this.catchingUp) {
      if (note) this.changed([addNotice(this.state, "warning", note)]);
      return;
    }
    this.catchingUp = true;
    this.forgetQuestions();
    const before = this.state;
    let failure: unknown;
    for (let attempt = 1; attempt <= CATCH_UP_TRIES; attempt += 1) {
      this.shownAnew(note);
      try {
        const result = await connection.agent.request<Attached>("_session/attach", {
          sessionId,
          role: "observer",
          historyPolicy: "full",
        });
        this.took(result);
        this.state.configOptions = result.configOptions ?? [];
        failure = undefined;
        break;
      } catch (error) {
        failure = error;
        if (attempt < CATCH_UP_TRIES) await new Promise((done) => setTimeout(done, 500 * attempt));
      }
    }
    this.catchingUp = false;
    if (failure !== undefined) this.gaveUp(before, failure);
    this.changed([ALL_ITEMS, "*"]);
  }

  /** The chat emptied for the session to be shown anew, saying why first. */
  private shownAnew(note?: string): void {
    const clientId = this.state.attachment?.clientId;
    this.state = emptyState();
    this.state.attachment = { clientId, role: "observer", clients: [] };
    addNotice(this.state, "warning", FELL_BEHIND);
    if (note) addNotice(this.state, "warning", note);
    this.changed([ALL_ITEMS, "*"]);
  }

  /** No attach worked: the chat as it was, and why this window no longer follows the session. */
  private gaveUp(before: ChatState, failure: unknown): void {
    this.state = before;
    addNotice(
      this.state,
      "error",
      `This window fell behind the session and could not attach again (${CATCH_UP_TRIES} tries: ${describe(failure)}). ` +
        "It no longer follows the session: attach to it again to follow it.",
      { label: "Attach to a Session…", command: ATTACH },
    );
  }

  /** Takes control of the attached session (the client that had it becomes an observer). */
  async takeControl(): Promise<boolean> {
    if (!this.attached || !this.connection || !this.sessionId) return false;
    if (this.state.attachment?.ended) {
      this.changed([addNotice(this.state, "warning", "This session was deleted: there is no control to take.")]);
      return false;
    }
    try {
      const result = await this.connection.agent.request<Attached>("_session/attach", {
        sessionId: this.sessionId,
        role: "controller",
      });
      this.took(result);
      this.changed(["*"]);
      return this.state.attachment?.role === "controller";
    } catch (error) {
      this.changed([addNotice(this.state, "error", `Could not take control: ${describe(error)}`)]);
      return false;
    }
  }

  private async openSession(): Promise<boolean> {
    const connection = this.connection;
    if (!connection) return false;
    try {
      const resume = this.resumeId;
      this.resumeId = undefined;
      if (resume && this.agentInfo?.agentCapabilities?.sessionCapabilities?.resume) {
        const resumed = await connection.agent.request(methods.agent.session.resume, {
          sessionId: resume,
          cwd: this.cwd,
          mcpServers: [],
        });
        this.sessionId = resume;
        this.setOptions(resumed.configOptions);
        return true;
      }
      const created = await connection.agent.request(methods.agent.session.new, {
        cwd: this.cwd,
        mcpServers: [],
      });
      this.sessionId = created.sessionId;
      this.setOptions(created.configOptions);
      return true;
    } catch (error) {
      this.fail(describe(error));
      return false;
    }
  }

  private setOptions(options: SessionConfigOption[] | null | undefined): void {
    this.state.configOptions = options ?? [];
    this.changed(["*"]);
  }

  private fail(message: string): void {
    this.log(`start failed: ${message}`);
    this.changed([addNotice(this.state, "error", message, { label: "Open settings", command: OPEN_SETTINGS })]);
  }

  private onExit(agent: AgentTarget, code: string): void {
    if (this.agent !== agent) return;
    this.log(`agent exited (${code})`);
    const wasRunning = this.sessionId !== undefined;
    const attachedTo = this.attachTo !== undefined && wasRunning;
    // Attached again, a window that had control takes it back.
    if (attachedTo) this.rejoinAs = this.state.attachment?.role;
    this.resumeId = this.sessionId;
    this.connection = undefined;
    this.agent = undefined;
    this.sessionId = undefined;
    this.cancelPermissions();
    if (this.state.busy) {
      this.state.busy = false;
    }
    if (attachedTo) {
      this.changed([
        addNotice(this.state, "error", `Disconnected from the server (${code}). Your next prompt attaches again.`),
      ]);
    } else if (wasRunning) {
      this.changed([
        addNotice(this.state, "error", `Talaria stopped (${code}). It starts again with your next prompt.`),
      ]);
    }
  }

  private stopAgent(): void {
    const agent = this.agent;
    this.agent = undefined;
    this.connection?.close();
    this.connection = undefined;
    this.sessionId = undefined;
    agent?.kill();
  }

  /**
   * The agent asks permission: the card waits for the user. A question withdrawn (another
   * client attached to the session answered first) leaves the card.
   */
  private onPermission(params: RequestPermissionRequest, signal?: AbortSignal): Promise<RequestPermissionResponse> {
    const id = params.toolCall.toolCallId;
    this.changed([askPermission(this.state, params.toolCall, params.options)]);
    return new Promise((resolve) => {
      this.permissions.set(id, resolve);
      signal?.addEventListener("abort", () => {
        if (this.permissions.get(id) !== resolve) return;
        this.permissions.delete(id);
        resolve({ outcome: { outcome: "cancelled" } });
        this.changed([answered(this.state, id)]);
      });
    });
  }

  /** The user picked an option on a card. */
  answerPermission(toolCallId: string, optionId: string): void {
    const resolve = this.permissions.get(toolCallId);
    if (!resolve) return;
    this.permissions.delete(toolCallId);
    resolve({ outcome: { outcome: "selected", optionId } });
    this.changed([answered(this.state, toolCallId)]);
  }

  /** The agent asks the user something: a form in the chat (URL mode is declined). */
  private async onQuestion(params: CreateElicitationRequest, signal?: AbortSignal): Promise<CreateElicitationResponse> {
    if (params.mode === "url" && "url" in params && typeof params.url === "string") {
      const went = await this.host.openAddress(params.message, params.url);
      return { action: went ? "accept" : "decline" };
    }
    if (params.mode !== "form" || !("requestedSchema" in params)) {
      return Promise.resolve({ action: "decline" });
    }
    if ("sessionId" in params && params.sessionId !== this.sessionId) {
      return Promise.resolve({ action: "cancel" });
    }
    const fields = formFields(params.requestedSchema as ElicitationSchema);
    const id = addQuestion(this.state, { message: params.message, fields });
    this.changed([id]);
    return new Promise((resolve) => {
      this.questions.set(id, { fields, resolve });
      // Withdrawn: another client attached to the session answered first.
      signal?.addEventListener("abort", () => {
        if (this.questions.get(id)?.resolve !== resolve) return;
        this.questions.delete(id);
        resolve({ action: "cancel" });
        this.changed([questionAnswered(this.state, id, "Answered in another client.")]);
      });
    });
  }

  /**
   * The user answered a question on its form. Returns why an accepted answer does not fit
   * (the form stays open), or nothing.
   */
  answerQuestion(id: string, action: string, content?: Record<string, unknown>): string | undefined {
    const waiting = this.questions.get(id);
    if (!waiting) return undefined;
    if (action === "accept") {
      const problem = checkAnswer(waiting.fields, content ?? {});
      if (problem) return problem;
    }
    this.questions.delete(id);
    const response: CreateElicitationResponse =
      action === "accept"
        ? { action: "accept", content: (content ?? {}) as Record<string, string | number | boolean | string[]> }
        : { action: action === "decline" ? "decline" : "cancel" };
    waiting.resolve(response);
    this.changed([questionAnswered(this.state, id, describeAnswer(response.action, content))]);
    return undefined;
  }

  private cancelQuestions(): void {
    for (const [id, waiting] of this.questions) {
      waiting.resolve({ action: "cancel" });
      questionAnswered(this.state, id, "Cancelled.");
    }
    this.questions.clear();
  }

  /** Drops the open questions unanswered (the cards and forms say so). */
  private forgetQuestions(): void {
    for (const id of this.questions.keys()) questionAnswered(this.state, id, "Left unanswered.");
    this.questions.clear();
    for (const id of this.permissions.keys()) answered(this.state, id);
    this.permissions.clear();
  }

  private cancelPermissions(): void {
    this.cancelQuestions();
    for (const [id, resolve] of this.permissions) {
      resolve({ outcome: { outcome: "cancelled" } });
      answered(this.state, id);
    }
    this.permissions.clear();
  }

  /** Sends a prompt; `shown` is how the chat shows it. Resolves with the stop reason. */
  async prompt(blocks: ContentBlock[], shown: string, attachments: string[] = []): Promise<string | undefined> {
    if (this.state.busy) return undefined;
    if (this.state.attachment?.ended) {
      // Deleted where it ran: nothing to send it to. Said, and the prompt is not shown as sent.
      const said = `Not sent: this session was deleted. Start a new session to go on ("${shown}").`;
      this.changed([addNotice(this.state, "warning", said)]);
      return undefined;
    }
    // Attaching again (after a lost connection) shows the chat anew: before the prompt.
    if (this.attached && !this.sessionId && !(await this.ensureStarted())) return undefined;
    const userItem = addUser(this.state, shown, attachments);
    this.changed([userItem]);
    this.state.busy = true;
    this.changed(["*"]);
    try {
      if (!(await this.ensureStarted()) || !this.connection || !this.sessionId) return undefined;
      const response = await this.connection.agent.request(methods.agent.session.prompt, {
        sessionId: this.sessionId,
        prompt: blocks,
      });
      // The agent names the prompt's message: a rewind can name it back.
      const named = (response._meta as { userMessageId?: unknown } | null | undefined)?.userMessageId;
      const item = this.state.items.find((i) => i.id === userItem);
      if (item?.kind === "user" && typeof named === "string") item.messageId = named;
      this.changed([userItem, addStop(this.state, response.stopReason)]);
      return response.stopReason;
    } catch (error) {
      if (isDetached(error)) {
        this.notSent(userItem, shown);
      } else if (error instanceof RequestError && error.code === MUST_TAKE_CONTROL) {
        this.refused(userItem, shown, error);
      } else if (this.connection) {
        this.changed([addNotice(this.state, "error", describe(error))]);
      }
      return undefined;
    } finally {
      this.state.busy = false;
      this.changed(["*"]);
      const next = this.queued.shift();
      if (next) void this.prompt(next.blocks, next.shown, next.attachments);
    }
  }

  /**
   * A prompt the server refused because another client has control: it leaves the chat (it
   * was not sent to the session), and a notice says how to send it.
   */
  private refused(userItem: string, shown: string, error: RequestError): void {
    this.state.items = this.state.items.filter((i) => i.id !== userItem);
    const data = error.data as { talaria?: { mustTakeControl?: unknown; elsewhere?: unknown } } | undefined;
    const text = data?.talaria?.mustTakeControl
      ? `Not sent: “${shown}”. Another client has control of this session: take control first, then send it again.`
      : `Not sent: “${shown}”. ${error.message}`;
    const action = data?.talaria?.mustTakeControl ? { label: "Take control", command: TAKE_CONTROL } : undefined;
    addNotice(this.state, "warning", text, action);
    this.changed([ALL_ITEMS]);
  }

  /**
   * A prompt or steer refused because the server had detached this window (it fell behind):
   * it leaves the chat, and the window catches up, saying what was not sent.
   */
  private notSent(userItem: string | undefined, shown: string): void {
    this.state.items = this.state.items.filter((i) => i.id !== userItem);
    this.changed([ALL_ITEMS]);
    void this.catchUp(`Not sent: “${shown}”. This window had fallen behind the session: send it again.`);
  }

  /**
   * Sends a message into the running turn; the agent shows it where it entered. With no turn
   * running (or an agent that cannot take it) it is a prompt, or queued behind the turn.
   * Resolves with what became of it.
   */
  async steer(blocks: ContentBlock[], shown: string): Promise<"injected" | "queued" | "prompted" | "refused"> {
    if (!this.state.busy) {
      void this.prompt(blocks, shown);
      return "prompted";
    }
    if (!this.canSteer || !this.connection || !this.sessionId) {
      this.queue(blocks, shown);
      return "queued";
    }
    try {
      const answer = await this.connection.agent.request<{ outcome?: string }>("_session/steering", {
        sessionId: this.sessionId,
        prompt: blocks,
        // A turn that ended meanwhile: the message is sent as the next prompt here.
        _meta: { steering: { idleBehavior: "promptRequired" } },
      });
      if (answer.outcome === "injected") return "injected";
    } catch (error) {
      if (isDetached(error)) {
        this.notSent(undefined, shown);
        return "refused";
      }
      this.changed([addNotice(this.state, "warning", `Not steered (${describe(error)}); queued instead.`)]);
    }
    if (this.state.busy) {
      this.queue(blocks, shown);
      return "queued";
    }
    void this.prompt(blocks, shown);
    return "prompted";
  }

  /**
   * Goes back to before the user message `itemId` (a running turn is stopped first): the
   * agent drops it and what followed from the conversation, and with `restoreFiles` puts
   * back the files those turns changed. With `resubmit`, that text is then sent in its place
   * (edit and resubmit). Resolves with whether the agent rewound.
   */
  async rewind(itemId: string, options: { restoreFiles: boolean; resubmit?: ContentBlock[]; shown?: string }): Promise<boolean> {
    const index = this.state.items.findIndex((i) => i.id === itemId);
    const target = this.state.items[index];
    if (!this.connection || !this.sessionId || !this.canRewind || target?.kind !== "user" || !target.messageId) {
      this.changed([addNotice(this.state, "warning", "This message cannot be rewound to (the agent did not name it).")]);
      return false;
    }
    const params: Record<string, unknown> = {
      sessionId: this.sessionId,
      beforeMessage: point(target.messageId, target.text),
      interruptIfRunning: true,
      restoreFiles: options.restoreFiles,
    };
    const before = this.state.items.slice(0, index);
    const previousUser = before.map((i) => i.kind).lastIndexOf("user");
    const answer = before
      .slice(previousUser + 1)
      .reverse()
      .find((i) => i.kind === "agent" && i.messageId);
    if (answer?.kind === "agent" && answer.messageId) params.resumeAtMessage = point(answer.messageId, answer.text);
    this.queued.length = 0;
    let result: { rewound?: boolean; reason?: string; files?: RestoredFiles };
    try {
      result = await this.connection.agent.request("_session/rewind", params);
    } catch (error) {
      this.changed([addNotice(this.state, "error", `Not rewound: ${describe(error)}`)]);
      return false;
    }
    if (!result.rewound) {
      this.changed([addNotice(this.state, "warning", `Not rewound: ${result.reason ?? "the agent refused"}`)]);
      return false;
    }
    truncateBefore(this.state, itemId);
    if (result.files) addNotice(this.state, "info", describeRestore(result.files));
    this.changed(["*"]);
    if (options.resubmit) void this.prompt(options.resubmit, options.shown ?? "");
    return true;
  }

  /** Queues a prompt behind the running turn (sent at once when none runs). */
  queue(blocks: ContentBlock[], shown: string, attachments: string[] = []): void {
    if (!this.state.busy) {
      void this.prompt(blocks, shown, attachments);
      return;
    }
    this.queued.push({ blocks, shown, attachments });
    this.changed([addNotice(this.state, "info", `Queued: ${shown}`)]);
  }

  /** Stop: cancels the running turn (and any question it asked). */
  async cancel(): Promise<void> {
    this.queued.length = 0;
    this.cancelPermissions();
    if (this.connection && this.sessionId) {
      await this.connection.agent.notify(methods.agent.session.cancel, { sessionId: this.sessionId });
    }
  }

  async setConfigOption(configId: string, value: string): Promise<void> {
    if (!this.connection || !this.sessionId) return;
    try {
      const response = await this.connection.agent.request(methods.agent.session.setConfigOption, {
        sessionId: this.sessionId,
        configId,
        value,
      });
      this.setOptions(response.configOptions);
    } catch (error) {
      if (isDetached(error)) void this.catchUp();
      else this.changed([addNotice(this.state, "error", describe(error))]);
    }
  }

  async listSessions(): Promise<SessionInfo[]> {
    if (!(await this.ensureStarted()) || !this.connection || !this.canList) return [];
    const listed = await this.connection.agent.request(methods.agent.session.list, { cwd: this.cwd });
    return listed.sessions;
  }

  /** Reopens a past session: the chat is cleared and the agent's replay fills it. */
  async loadSession(sessionId: string): Promise<boolean> {
    if (!(await this.ensureStarted()) || !this.connection || !this.canLoad) return false;
    await this.closeCurrent();
    this.state = emptyState();
    this.sessionId = sessionId;
    this.changed(["*"]);
    try {
      const loaded = await this.connection.agent.request(methods.agent.session.load, {
        sessionId,
        cwd: this.cwd,
        mcpServers: [],
      });
      this.setOptions(loaded.configOptions);
      return true;
    } catch (error) {
      this.sessionId = undefined;
      this.changed([addNotice(this.state, "error", describe(error))]);
      return false;
    }
  }

  /** Starts a fresh session (the current one is closed and stays in the list). */
  async newSession(): Promise<boolean> {
    await this.closeCurrent();
    this.state = emptyState();
    this.changed(["*"]);
    return this.ensureStarted();
  }

  /** Closes the current session (it stays in the list) and clears the chat. */
  async closeSession(): Promise<void> {
    await this.closeCurrent();
    this.state = emptyState();
    this.changed(["*"]);
  }

  private async closeCurrent(): Promise<void> {
    const sessionId = this.sessionId;
    this.sessionId = undefined;
    if (!sessionId || !this.connection) return;
    if (this.attached) {
      // Leaves the session; it goes on for the other clients (the last one's detach closes
      // it). Its open questions are theirs to answer: leaving answers none of them.
      this.forgetQuestions();
      try {
        await this.connection.agent.request("_session/detach", { sessionId });
      } catch (error) {
        this.log(`detaching from ${sessionId} failed: ${describe(error)}`);
      }
      return;
    }
    this.cancelPermissions();
    if (this.agentInfo?.agentCapabilities?.sessionCapabilities?.close) {
      try {
        await this.connection.agent.request(methods.agent.session.close, { sessionId });
      } catch (error) {
        this.log(`closing ${sessionId} failed: ${describe(error)}`);
      }
    }
  }

  /** Closes the session and stops the agent. */
  async dispose(): Promise<void> {
    await this.closeCurrent();
    this.stopAgent();
  }
}

/** A protocol or start error as one line for the user. */
export function describe(error: unknown): string {
  if (error instanceof RequestError) return error.message;
  if (error && typeof error === "object" && "message" in error) return String((error as { message: unknown }).message);
  return String(error);
}

/** What a rewind with `restoreFiles` did to the files. */
type RestoredFiles = { restored?: string[]; skipped?: string[]; failed?: { path: string; error: string }[] };

/** A message as a rewind names it: its id and the SHA-256 of its text. */
function point(messageId: string, text: string): { messageId: string; messageFingerprint: string; messageOccurrence: number } {
  const hex = createHash("sha256").update(text, "utf8").digest("hex");
  return { messageId, messageFingerprint: `sha256:${hex}`, messageOccurrence: 1 };
}

/** A rewind's file report as one line. */
export function describeRestore(files: RestoredFiles): string {
  const parts = [`Files put back: ${files.restored?.length ?? 0}.`];
  if (files.skipped?.length) parts.push(`Left as they are (changed since the agent did): ${files.skipped.join(", ")}.`);
  for (const failed of files.failed ?? []) parts.push(`Not put back: ${failed.path}: ${failed.error}.`);
  return parts.join(" ");
}
