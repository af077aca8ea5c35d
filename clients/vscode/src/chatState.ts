// The chat as the view shows it, built from ACP session updates by a pure reducer: messages,
// thoughts, tool cards (with their pending permission question), the plan, usage, commands,
// and the session's config options; for a session attached to in a `talaria serve`, who is
// attached, who has control, another client's running turn, who answered a question, and
// whether the server detached this window for falling behind.
// Knows nothing of VS Code.
import type {
  AvailableCommand,
  ContentBlock,
  PermissionOption,
  PlanEntry,
  SessionConfigOption,
  SessionUpdate,
  ToolCallContent,
  ToolCallLocation,
} from "@agentclientprotocol/sdk";

import type { Question } from "./form.js";

export type ChatItem =
  | {
      kind: "user";
      id: string;
      text: string;
      attachments: string[];
      steered?: boolean;
      /** The agent's `messageId` for it (what a rewind names). */
      messageId?: string;
    }
  | { kind: "agent"; id: string; text: string; messageId?: string }
  | { kind: "thought"; id: string; text: string }
  | { kind: "tool"; id: string; card: ToolCard }
  | { kind: "notice"; id: string; severity: string; text: string; action?: NoticeAction }
  | { kind: "question"; id: string; question: Question }
  | { kind: "stop"; id: string; reason: string };

/** A button on a notice (e.g. open the settings after a failed start). */
export type NoticeAction = { label: string; command: string };

export type ToolCard = {
  toolCallId: string;
  title: string;
  kind: string;
  status: string;
  content: ToolCallContent[];
  locations: ToolCallLocation[];
  rawOutput?: unknown;
  /** The agent's permission question, while it waits for the user. */
  permission?: { options: PermissionOption[] };
  /** The options of its last question (to name the one another client picked). */
  asked?: PermissionOption[];
  /** Who answered its question, when several clients were asked (an attached session). */
  resolved?: { by: string; answer: string };
};

/** A client attached to the same session (`_meta["talaria/attachment"]`'s `clients`). */
export type AttachedClient = { clientId: string; name?: string; role: string };

/** A session this window attached to in a `talaria serve`, shared with other clients. */
export type Attachment = {
  /** This window among the session's clients. */
  clientId?: string;
  role: "controller" | "observer";
  clients: AttachedClient[];
  /** The client with control, if any. */
  controller?: string;
  /** The client whose turn runs (one that is not this window), while it runs. */
  othersTurn?: string;
  /** The session ended where it ran (deleted): this window follows it no more. */
  ended?: boolean;
};

export type Usage = { used: number; size: number; cost?: { amount: number; currency: string } };

export type ChatState = {
  items: ChatItem[];
  /** The output so far of the commands the agent runs in editor terminals, by terminal id. */
  terminals: Record<string, string>;
  plan: PlanEntry[];
  usage?: Usage;
  commands: AvailableCommand[];
  configOptions: SessionConfigOption[];
  title?: string;
  /** A prompt is running. */
  busy: boolean;
  /** Set when the session is one attached to in a `talaria serve`. */
  attachment?: Attachment;
};

/** A changed id meaning the item list changed as a whole (items went): the view shows it anew. */
export const ALL_ITEMS = "**";

export function emptyState(): ChatState {
  return { items: [], terminals: {}, plan: [], commands: [], configOptions: [], busy: false };
}

let counter = 0;
function nextId(prefix: string): string {
  counter += 1;
  return `${prefix}-${counter}`;
}

/** The text of a content block as the chat shows it. */
export function blockText(block: ContentBlock): string {
  switch (block.type) {
    case "text":
      return block.text;
    case "image":
      return "[image]";
    case "audio":
      return "[audio]";
    case "resource_link":
      return `@${block.name}`;
    case "resource":
      return "uri" in block.resource ? `@${block.resource.uri}` : "[resource]";
    default:
      return "";
  }
}

/**
 * Appends streamed text to the last item of `kind`, or starts a new one (also when the
 * agent says a new message starts: another `messageId`). Returns its id.
 */
function appendText(state: ChatState, kind: "agent" | "thought", text: string, messageId?: string): string {
  const last = state.items[state.items.length - 1];
  if (last && last.kind === kind) {
    const sameMessage = !messageId || last.kind !== "agent" || !last.messageId || last.messageId === messageId;
    if (sameMessage) {
      last.text += text;
      if (last.kind === "agent" && messageId) last.messageId = messageId;
      return last.id;
    }
  }
  const item = kind === "agent" ? { kind, id: nextId(kind), text, messageId } : { kind, id: nextId(kind), text };
  state.items.push(item);
  return item.id;
}

/** The id of the message a chunk belongs to, when the agent says it. */
function messageIdOf(update: SessionUpdate): string | undefined {
  const id = (update as { messageId?: unknown }).messageId;
  return typeof id === "string" && id ? id : undefined;
}

/** The items before the user message `itemId` (what a rewind to before it keeps). */
export function truncateBefore(state: ChatState, itemId: string): void {
  const index = state.items.findIndex((i) => i.id === itemId);
  if (index >= 0) state.items.length = index;
}

export function findCard(state: ChatState, toolCallId: string): ToolCard | undefined {
  for (const item of state.items) {
    if (item.kind === "tool" && item.card.toolCallId === toolCallId) return item.card;
  }
  return undefined;
}

function itemIdOfCard(state: ChatState, toolCallId: string): string | undefined {
  return state.items.find((i) => i.kind === "tool" && i.card.toolCallId === toolCallId)?.id;
}

/** Adds a user message (the prompt as sent, or replayed). Returns its item id. */
export function addUser(state: ChatState, text: string, attachments: string[] = [], messageId?: string): string {
  const last = state.items[state.items.length - 1];
  // A replayed message may come in several chunks (of the same message).
  const sameMessage = !messageId || !last || last.kind !== "user" || !last.messageId || last.messageId === messageId;
  if (last && last.kind === "user" && attachments.length === 0 && text && !last.attachments.length && sameMessage) {
    last.text += text;
    if (messageId) last.messageId = messageId;
    return last.id;
  }
  const item = { kind: "user" as const, id: nextId("user"), text, attachments, messageId };
  state.items.push(item);
  return item.id;
}

export function addNotice(state: ChatState, severity: string, text: string, action?: NoticeAction): string {
  const item = { kind: "notice" as const, id: nextId("notice"), severity, text, action };
  state.items.push(item);
  return item.id;
}

export function addStop(state: ChatState, reason: string): string {
  const item = { kind: "stop" as const, id: nextId("stop"), reason };
  state.items.push(item);
  return item.id;
}

/**
 * Applies one session update. Returns the ids of the chat items that changed ("*" when
 * something outside the item list changed: plan, usage, commands, options, title).
 */
/** Whether a user message chunk is a steer, shown where it entered the running turn. */
function isSteered(update: SessionUpdate): boolean {
  const meta = (update as { _meta?: { talaria?: { steered?: unknown } } | null })._meta;
  return meta?.talaria?.steered === true;
}

/** A message steered into the running turn, where it entered (a chunk of the same steer
 * joins it). */
export function addSteered(state: ChatState, text: string): string {
  const last = state.items[state.items.length - 1];
  if (last && last.kind === "user" && last.steered) {
    last.text += text;
    return last.id;
  }
  const item = { kind: "user" as const, id: nextId("user"), text, attachments: [], steered: true };
  state.items.push(item);
  return item.id;
}

export function applyUpdate(state: ChatState, update: SessionUpdate): string[] {
  switch (update.sessionUpdate) {
    case "user_message_chunk":
      if (isSteered(update)) return [addSteered(state, blockText(update.content))];
      return [addUser(state, blockText(update.content), [], messageIdOf(update))];
    case "agent_message_chunk":
      return [appendText(state, "agent", blockText(update.content), messageIdOf(update))];
    case "agent_thought_chunk":
      return [appendText(state, "thought", blockText(update.content))];
    case "tool_call": {
      const existing = findCard(state, update.toolCallId);
      const card: ToolCard = existing ?? {
        toolCallId: update.toolCallId,
        title: update.title,
        kind: update.kind ?? "other",
        status: update.status ?? "pending",
        content: [],
        locations: [],
      };
      card.title = update.title;
      card.kind = update.kind ?? card.kind;
      card.status = update.status ?? card.status;
      card.content = update.content ?? card.content;
      card.locations = update.locations ?? card.locations;
      if (update.rawOutput !== undefined) card.rawOutput = update.rawOutput;
      if (existing) return [itemIdOfCard(state, update.toolCallId) ?? "*"];
      const item = { kind: "tool" as const, id: nextId("tool"), card };
      state.items.push(item);
      return [item.id];
    }
    case "tool_call_update": {
      let card = findCard(state, update.toolCallId);
      if (!card) {
        card = {
          toolCallId: update.toolCallId,
          title: update.title ?? "Tool call",
          kind: update.kind ?? "other",
          status: update.status ?? "pending",
          content: [],
          locations: [],
        };
        state.items.push({ kind: "tool", id: nextId("tool"), card });
      }
      if (update.title) card.title = update.title;
      if (update.kind) card.kind = update.kind;
      if (update.status) card.status = update.status;
      if (update.content) card.content = update.content;
      if (update.locations) card.locations = update.locations;
      if (update.rawOutput !== undefined) card.rawOutput = update.rawOutput;
      if (card.status === "completed" || card.status === "failed") card.permission = undefined;
      resolvedBy(state, card, update._meta);
      return [itemIdOfCard(state, update.toolCallId) ?? "*"];
    }
    case "plan":
      state.plan = update.entries;
      return ["*"];
    case "available_commands_update":
      state.commands = update.availableCommands;
      return ["*"];
    case "config_option_update":
      state.configOptions = update.configOptions;
      return ["*"];
    case "current_mode_update": {
      for (const option of state.configOptions) {
        if (option.category === "mode" && option.type === "select") option.currentValue = update.currentModeId;
      }
      return ["*"];
    }
    case "session_info_update":
      if (typeof update.title === "string") state.title = update.title;
      return [...attachmentUpdate(state, update._meta), "*"];
    case "usage_update":
      state.usage = {
        used: update.used,
        size: update.size,
        cost: update.cost ? { amount: update.cost.amount, currency: update.cost.currency } : undefined,
      };
      return ["*"];
    case "notice":
      return [
        addNotice(
          state,
          String(update.severity ?? "info"),
          update.description ? `${update.title}: ${update.description}` : update.title,
        ),
      ];
    default:
      return [];
  }
}

/** Shows a permission question on its card (creating the card if the agent sent none). */
export function askPermission(
  state: ChatState,
  toolCall: { toolCallId: string; title?: string | null },
  options: PermissionOption[],
): string {
  let card = findCard(state, toolCall.toolCallId);
  if (!card) {
    applyUpdate(state, {
      sessionUpdate: "tool_call",
      toolCallId: toolCall.toolCallId,
      title: toolCall.title ?? "Permission",
      status: "pending",
    });
    card = findCard(state, toolCall.toolCallId);
  }
  if (!card) return "*";
  card.permission = { options };
  card.asked = options;
  card.resolved = undefined;
  return itemIdOfCard(state, toolCall.toolCallId) ?? "*";
}

/** Clears a card's permission question once answered. */
export function answered(state: ChatState, toolCallId: string): string {
  const card = findCard(state, toolCallId);
  if (card) card.permission = undefined;
  return itemIdOfCard(state, toolCallId) ?? "*";
}

/** Adds an agent's question (a form) to the chat. Returns its item id. */
export function addQuestion(state: ChatState, question: Question): string {
  const item = { kind: "question" as const, id: nextId("question"), question };
  state.items.push(item);
  return item.id;
}

/** Marks a question answered, with how. */
export function questionAnswered(state: ChatState, id: string, answer: string): string {
  const item = state.items.find((i) => i.id === id);
  if (item?.kind === "question") item.question.answer = answer;
  return id;
}

/** Output of a command in an editor terminal; returns the ids of the cards that show it. */
export function terminalOutput(state: ChatState, terminalId: string, text: string): string[] {
  const kept = (state.terminals[terminalId] ?? "") + text;
  // Cards show the end of an output: keep a bounded tail.
  state.terminals[terminalId] = kept.length > 64_000 ? kept.slice(kept.length - 64_000) : kept;
  return state.items
    .filter(
      (i) =>
        i.kind === "tool" && i.card.content.some((c) => c.type === "terminal" && c.terminalId === terminalId),
    )
    .map((i) => i.id);
}

type Meta = { [key: string]: unknown } | null | undefined;

/** The `_meta` key of the roster of an attached session. */
export const ROSTER_KEY = "talaria/attachment";
/** The `_meta` key of another client's turn. */
export const TURN_KEY = "talaria/turn";
/** The `_meta` key of a question's outcome, and who gave it. */
export const RESOLVED_KEY = "talaria/permissionResolved";

type Roster = {
  clients?: AttachedClient[];
  controller?: string | null;
  detached?: { clientId?: unknown } | null;
  /** The session ended where it ran (deleted) while this window followed it from another process. */
  ended?: { reason?: unknown; message?: unknown } | null;
};

/**
 * Whether `update` is the server's notice that it detached this window from the session it
 * follows because the window fell behind (`_meta["talaria/attachment"].detached` naming it).
 * A notice naming another client only tells who is attached.
 */
export function detachedHere(state: ChatState, update: SessionUpdate): boolean {
  const clientId = state.attachment?.clientId;
  if (update.sessionUpdate !== "session_info_update" || !clientId) return false;
  const roster = (update._meta as Meta)?.[ROSTER_KEY] as Roster | undefined;
  return roster?.detached?.clientId === clientId;
}

/** Takes in a roster (from an update or an attach's answer): who is attached, who controls. */
export function setRoster(state: ChatState, roster: Roster): void {
  const attachment = state.attachment;
  if (!attachment) return;
  attachment.clients = Array.isArray(roster.clients) ? roster.clients : attachment.clients;
  attachment.controller = roster.controller ?? undefined;
  attachment.role = attachment.clientId && attachment.controller === attachment.clientId ? "controller" : "observer";
}

/** What a `session_info_update`'s `_meta` says of an attached session; changed item ids. */
function attachmentUpdate(state: ChatState, meta: Meta): string[] {
  if (!state.attachment || !meta) return [];
  const roster = meta[ROSTER_KEY] as Roster | undefined;
  if (roster && typeof roster === "object") setRoster(state, roster);
  const ended = roster && typeof roster === "object" ? endedNotice(state, roster) : [];
  if (ended.length) return ended;
  const turn = meta[TURN_KEY] as { state?: unknown; stopReason?: unknown; promptedBy?: unknown } | undefined;
  if (!turn || typeof turn !== "object") return [];
  if (turn.state === "running") {
    state.attachment.othersTurn = typeof turn.promptedBy === "string" ? turn.promptedBy : "another client";
    return [];
  }
  state.attachment.othersTurn = undefined;
  return [addStop(state, typeof turn.stopReason === "string" ? turn.stopReason : "error")];
}

/** The notice of a session that ended where it ran (once); changed item ids. */
function endedNotice(state: ChatState, roster: Roster): string[] {
  const ended = roster.ended;
  if (!state.attachment || !ended || typeof ended !== "object" || state.attachment.ended) return [];
  state.attachment.ended = true;
  const said = typeof ended.message === "string" ? ended.message : "This session ended.";
  return [addNotice(state, "warning", said)];
}

/** A client as the chat names it: its name, its id, and whether it is this window. */
export function clientName(state: ChatState, client: { clientId?: string; name?: string | null }): string {
  const here = client.clientId !== undefined && client.clientId === state.attachment?.clientId;
  if (here) return "this window";
  const known = state.attachment?.clients.find((c) => c.clientId === client.clientId);
  const name = client.name ?? known?.name;
  return name ? `${name} (${client.clientId ?? "?"})` : (client.clientId ?? "another client");
}

/**
 * A `tool_call_update` saying who answered the card's question: shown on the card of an
 * attached session (in a session of this window alone, it was this window).
 */
function resolvedBy(state: ChatState, card: ToolCard, meta: Meta): void {
  if (!state.attachment) return;
  const said = meta?.[RESOLVED_KEY] as
    | { by?: { clientId?: string; name?: string | null }; outcome?: { outcome?: string; optionId?: string } }
    | undefined;
  if (!said || typeof said !== "object") return;
  const optionId = said.outcome?.optionId;
  const option = card.permission?.options.find((o) => o.optionId === optionId) ?? card.asked?.find((o) => o.optionId === optionId);
  const answer = said.outcome?.outcome === "selected" ? (option?.name ?? optionId ?? "selected") : "cancelled";
  card.resolved = { by: clientName(state, said.by ?? {}), answer };
  card.permission = undefined;
}
