// An in-process ACP agent for the controller's tests, built with the SDK's agent side: it
// records what it was asked, streams a scripted answer, asks permission for a tool call and
// writes a file through the client, and can be told to fail its session or to "crash".
import { agent, methods, RequestError, type AgentApp, type SessionUpdate } from "@agentclientprotocol/sdk";

import type { AgentTarget, EditorHost } from "../src/controller.js";

export type FakeOptions = {
  /** session/new fails with this auth error. */
  authError?: string;
  resume?: boolean;
};

export class FakeAgent {
  readonly received: { method: string; params: unknown }[] = [];
  permissionAnswers: unknown[] = [];
  questionAnswers: unknown[] = [];
  cancelled = 0;
  starts = 0;
  private exit?: (code: string) => void;
  private release?: () => void;
  private steered = false;
  private prompts = 0;

  constructor(private readonly options: FakeOptions = {}) {}

  /** A launcher that starts this agent in process. */
  launcher(): () => AgentTarget {
    return () => {
      this.starts += 1;
      return {
        target: this.app(),
        exited: new Promise<string>((resolve) => (this.exit = resolve)),
        kill: () => this.exit?.("killed"),
      };
    };
  }

  /** Simulates the agent process dying. */
  crash(): void {
    this.exit?.("exit code 101");
  }

  private app(): AgentApp {
    return agent({ name: "fake" })
      .onRequest(methods.agent.initialize, ({ params }) => {
        this.received.push({ method: "initialize", params });
        return {
          protocolVersion: 1,
          _meta: { steering: { supported: true }, sessionRewind: { supported: true, restoreFiles: true } },
          agentCapabilities: {
            loadSession: true,
            promptCapabilities: { image: true, embeddedContext: true },
            sessionCapabilities: { list: {}, close: {}, ...(this.options.resume === false ? {} : { resume: {} }) },
          },
        };
      })
      .onRequest(methods.agent.session.new, ({ params }) => {
        this.received.push({ method: "session/new", params });
        if (this.options.authError) throw RequestError.authRequired(undefined, this.options.authError);
        return {
          sessionId: "s-1",
          configOptions: [
            {
              id: "mode",
              name: "Mode",
              type: "select" as const,
              category: "mode",
              currentValue: "ask",
              options: [
                { value: "ask", name: "Ask" },
                { value: "yolo", name: "Yolo" },
              ],
            },
          ],
        };
      })
      .onRequest(methods.agent.session.resume, ({ params }) => {
        this.received.push({ method: "session/resume", params });
        return {};
      })
      .onRequest(methods.agent.session.list, ({ params }) => {
        this.received.push({ method: "session/list", params });
        return { sessions: [{ sessionId: "old-1", cwd: "/w", title: "Earlier work" }] };
      })
      .onRequest(methods.agent.session.load, async ({ params, client }) => {
        this.received.push({ method: "session/load", params });
        const replay = (update: SessionUpdate) =>
          client.notify(methods.client.session.update, { sessionId: params.sessionId, update });
        await replay({ sessionUpdate: "user_message_chunk", content: { type: "text", text: "earlier question" } });
        await replay({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "earlier answer" } });
        await replay({ sessionUpdate: "tool_call", toolCallId: "old-t", title: "Read a.txt", kind: "read", status: "completed" });
        return {};
      })
      .onRequest(methods.agent.session.close, ({ params }) => {
        this.received.push({ method: "session/close", params });
        return {};
      })
      // A steer enters the slow turn (shown where it entered) and ends it; with no turn running
      // the client asked to be told.
      .onRequest(
        "_session/steering",
        (params: unknown) => params as { sessionId: string; prompt: { type: string; text?: string }[] },
        async ({ params, client }) => {
          this.received.push({ method: "_session/steering", params });
          if (!this.release) return { outcome: "promptRequired", reason: "noRunningTurn" };
          await client.notify(methods.client.session.update, {
            sessionId: params.sessionId,
            update: {
              sessionUpdate: "user_message_chunk",
              content: { type: "text", text: params.prompt[0]?.text ?? "" },
              _meta: { talaria: { steered: true } },
            },
          });
          this.steered = true;
          this.release();
          return { outcome: "injected" };
        },
      )
      // A rewind: recorded, and answered as Talaria does (files put back when asked).
      .onRequest(
        "_session/rewind",
        (params: unknown) => params as { sessionId: string; restoreFiles?: boolean },
        ({ params }) => {
          this.received.push({ method: "_session/rewind", params });
          return {
            rewound: true,
            sessionId: params.sessionId,
            ...(params.restoreFiles ? { files: { restored: ["/w/a.txt"], skipped: ["/w/b.txt"], failed: [] } } : {}),
          };
        },
      )
      .onNotification(methods.agent.session.cancel, () => {
        this.cancelled += 1;
        this.release?.();
      })
      .onRequest(methods.agent.session.prompt, async ({ params, client }) => {
        this.received.push({ method: "session/prompt", params });
        this.prompts += 1;
        // The prompt's message, named in the answer as Talaria names it.
        const named = { _meta: { userMessageId: `user-${this.prompts}` } };
        const text = params.prompt[0]?.type === "text" ? params.prompt[0].text : "";
        const update = (u: SessionUpdate) =>
          client.notify(methods.client.session.update, { sessionId: params.sessionId, update: u });
        if (text === "hello") {
          await update({ sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "greeting" } });
          await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "Hello " }, messageId: `agent-${this.prompts}` });
          await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "**there**" }, messageId: `agent-${this.prompts}` });
          await update({ sessionUpdate: "usage_update", used: 1200, size: 128000 });
          return { stopReason: "end_turn" as const, ...named };
        }
        if (text === "write") {
          await update({ sessionUpdate: "tool_call", toolCallId: "t1", title: "Write a.txt", kind: "edit", status: "pending" });
          const answer = await client.request(methods.client.session.requestPermission, {
            sessionId: params.sessionId,
            toolCall: { toolCallId: "t1" },
            options: [
              { optionId: "allow_once", name: "Allow once", kind: "allow_once" },
              { optionId: "reject_once", name: "Reject", kind: "reject_once" },
            ],
          });
          this.permissionAnswers.push(answer.outcome);
          if (answer.outcome.outcome === "selected" && answer.outcome.optionId === "allow_once") {
            await client.request(methods.client.fs.writeTextFile, { sessionId: params.sessionId, path: "/w/a.txt", content: "A" });
            await update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed" });
            return { stopReason: "end_turn" as const };
          }
          await update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "failed" });
          return { stopReason: answer.outcome.outcome === "cancelled" ? ("cancelled" as const) : ("end_turn" as const) };
        }
        if (text === "ask") {
          const answer = await client.request(methods.client.elicitation.create, {
            sessionId: params.sessionId,
            mode: "form",
            message: "Which database?",
            requestedSchema: {
              type: "object",
              properties: {
                answer: { type: "string", title: "Answer", enum: ["postgres", "sqlite"] },
                tables: { type: "integer", title: "Tables" },
              },
              required: ["answer"],
            },
          });
          this.questionAnswers.push(answer);
          return { stopReason: "end_turn" as const };
        }
        if (text === "sign in") {
          const answer = await client.request(methods.client.elicitation.create, {
            sessionId: params.sessionId,
            mode: "url",
            elicitationId: "sign-in-1",
            url: "https://auth.example/authorize?state=s",
            message: "Sign in to the MCP server web to use its tools.",
          });
          this.questionAnswers.push(answer);
          return { stopReason: "end_turn" as const };
        }
        if (text === "run") {
          await update({ sessionUpdate: "tool_call", toolCallId: "t2", title: "Run make", kind: "execute", status: "in_progress" });
          const { terminalId } = await client.request(methods.client.terminal.create, {
            sessionId: params.sessionId,
            command: "make",
          });
          await update({
            sessionUpdate: "tool_call_update",
            toolCallId: "t2",
            content: [{ type: "terminal", terminalId }],
          });
          await client.request(methods.client.terminal.waitForExit, { sessionId: params.sessionId, terminalId });
          await update({ sessionUpdate: "tool_call_update", toolCallId: "t2", status: "completed" });
          return { stopReason: "end_turn" as const };
        }
        if (text === "slow") {
          await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "working" } });
          await new Promise<void>((resolve) => (this.release = resolve));
          this.release = undefined;
          if (this.steered) {
            this.steered = false;
            await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "steered answer" } });
            return { stopReason: "end_turn" as const };
          }
          return { stopReason: "cancelled" as const };
        }
        return { stopReason: "end_turn" as const, ...named };
      });
  }
}

/** A host that records what the agent asked of the editor. */
export class RecordingHost implements EditorHost {
  readonly writes: { path: string; content: string }[] = [];
  async readTextFile() {
    return { content: "" };
  }
  async writeTextFile(params: { path: string; content: string }) {
    this.writes.push({ path: params.path, content: params.content });
  }
  /** Output the next command writes, after it started (one piece every few ms). */
  terminalWrites: string[] = [];
  private exitTerminal?: () => void;
  async createTerminal(_params: unknown, onOutput?: (text: string) => void) {
    const pieces = [...this.terminalWrites];
    void (async () => {
      for (const piece of pieces) {
        await new Promise((ok) => setTimeout(ok, 5));
        onOutput?.(piece);
      }
      await new Promise((ok) => setTimeout(ok, 5));
      this.exitTerminal?.();
    })();
    return { terminalId: "term-1" };
  }
  async terminalOutput() {
    return { output: "", truncated: false };
  }
  async waitForTerminalExit() {
    await new Promise<void>((resolve) => (this.exitTerminal = resolve));
    return { exitCode: 0 };
  }
  /** The addresses the agent asked to open, and whether the user goes. */
  readonly opened: { message: string; url: string }[] = [];
  goes = true;
  async openAddress(message: string, url: string) {
    this.opened.push({ message, url });
    return this.goes;
  }
  async killTerminal() {}
  async releaseTerminal() {}
}
