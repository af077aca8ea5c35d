// The reference web client of `talaria serve`: connect with the token, list and open
// sessions (listed by title, the title updated as the agent names it), stream answers as
// Markdown, show tool cards with the agent's permission questions (its own wording and
// choices) and diffs, cancel, steer the running turn, load a past session; pick the mode and
// the model (the session's config options), follow the agent's plan in a panel, and offer
// its slash commands as you type `/`; see who else is attached to a session and who has
// control, take control with a button, and attach to a running session from a link
// (`#token=…&session=ID`); a page that fell behind (the server detached it) says so and
// attaches again, the session shown anew. Plain modules, no framework: a frontend author can
// copy it.
//
// The page's state keeps sessions apart: each opened session is a `SessionView` (its
// transcript, modes and options, plan, commands, turn, and the role this page has in it), and
// the chat shows one of them. Updates go to the view of their session, shown or not.
import { AcpConnection } from "/acp.js";
import { renderMarkdown } from "/markdown.js";

const $ = (id) => document.getElementById(id);

function el(tag, className, children = []) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.append(...children);
  return node;
}

/** The most updates kept for a session before its view exists (its `session/new` answer). */
const EARLY_UPDATES = 500;
/** How many times a page that fell behind attaches again before it gives up. */
const CATCH_UP_TRIES = 3;
/** What a page that fell behind says at the top of the session it is shown again. */
const FELL_BEHIND =
  "This page fell behind the session: updates came faster than it read them, so the server " +
  "stopped sending it any. It attached again: the whole session is shown below, then live.";

const page = {
  /** @type {AcpConnection | null} */
  connection: null,
  /** What the connection is doing, for the status line ("connected to talaria", …). */
  link: "not connected",
  /** The sessions the agent listed or this page started: id → {sessionId, cwd, title, updatedAt}. */
  listed: new Map(),
  /** The sessions opened here: id → SessionView. */
  views: new Map(),
  /** Updates of sessions not opened yet (an update may overtake the answer that opens one). */
  early: new Map(),
  /** The id of the session the chat shows. */
  shown: null,
  /** This page among a session's attached clients (`initialize`'s `_meta.sessionAttach`). */
  clientId: null,
  /** A session to attach to once connected (the link's `session=`). */
  attachTo: null,
};

/** One opened session: what the chat shows of it, and what it knows. */
class SessionView {
  constructor({ sessionId, cwd, title = null, role = "owner" }) {
    this.sessionId = sessionId;
    this.cwd = cwd;
    this.title = title;
    /** This page's part in the session: "owner" drives it (others may only watch, later). */
    this.role = role;
    this.running = false;
    /** The turn's state as the status line says it. */
    this.status = "ready";
    /** Legacy session modes: {currentModeId, availableModes}. */
    this.modes = null;
    this.configOptions = [];
    this.plan = [];
    this.commands = [];
    /** The message being streamed: {kind, node, text, messageId}. */
    this.last = null;
    this.cards = new Map();
    /** Who is attached and who has control (`_meta["talaria/attachment"]`), once told. */
    this.roster = null;
    /** Attaching again after falling behind (at most one catch-up at a time). */
    this.catchingUp = false;
    this.root = el("div", "session-transcript");
    this.root.dataset.session = sessionId;
    this.root.dataset.role = role;
  }

  get shown() {
    return page.shown === this.sessionId;
  }

  /** Whether this page has control (it opened the session, or took control). */
  get controls() {
    return this.roster ? this.roster.controller === page.clientId : this.role === "owner";
  }

  /** Takes the modes and config options of a `session/new`, `load` or `set_config_option` answer. */
  settings(result) {
    if (result?.modes) this.modes = result.modes;
    if (Array.isArray(result?.configOptions)) this.configOptions = result.configOptions;
  }

  /** The agent switched the mode (`current_mode_update`). */
  modeSwitched(modeId) {
    if (this.modes) this.modes.currentModeId = modeId;
    for (const option of this.configOptions) {
      if (option.category === "mode" || option.id === "mode") option.currentValue = modeId;
    }
  }

  scrollDown() {
    if (this.shown) $("transcript").scrollTop = $("transcript").scrollHeight;
  }

  /** One message of the transcript, continued while chunks of its kind (and message) keep coming. */
  append(kind, text, messageId) {
    const last = this.last;
    const same = last?.kind === kind && (!messageId || !last.messageId || last.messageId === messageId);
    if (!same) {
      const node = el("div", `message ${kind}`);
      node.dataset.kind = kind;
      if (kind === "steered") node.append(el("span", "label", ["steered"]), el("span", "text"));
      this.root.append(node);
      this.last = { kind, node, text: "", messageId };
    }
    this.last.text += text;
    if (messageId) this.last.messageId = messageId;
    const node = this.last.node;
    if (kind === "agent") renderMarkdown(node, this.last.text);
    else if (kind === "steered") node.querySelector(".text").textContent = this.last.text;
    else node.textContent = this.last.text;
    this.scrollDown();
  }

  /** A tool call's card, made or brought up to date. */
  card(update) {
    let card = this.cards.get(update.toolCallId);
    if (!card) {
      const title = el("div", "title", [el("span", "name"), el("span", "state")]);
      const node = el("div", "tool", [title, el("div", "body")]);
      node.dataset.toolCall = update.toolCallId;
      this.root.append(node);
      card = { node, title: "", status: "pending" };
      this.cards.set(update.toolCallId, card);
      this.last = null;
    }
    if (update.title) card.title = update.title;
    if (update.status) card.status = update.status;
    if (update.kind) card.node.dataset.kind = update.kind;
    card.node.querySelector(".name").textContent = card.title;
    card.node.querySelector(".state").textContent = card.status.replace("_", " ");
    card.node.dataset.status = card.status;
    if (update.content) card.node.querySelector(".body").replaceChildren(...update.content.map(contentNode));
    this.scrollDown();
    return card;
  }

  /** A notice of the agent's, or a line of this page's. */
  notice(text) {
    this.last = null;
    this.append("notice", text);
    this.last = null;
  }

  /** Empties the transcript, for the session to be shown again from its start. */
  clear() {
    this.root.replaceChildren();
    this.last = null;
    this.cards.clear();
    this.plan = [];
    this.running = false;
  }
}

function shownView() {
  return page.views.get(page.shown) ?? null;
}

// ---------------------------------------------------------------------------------------
// The status line, the session list, the session bar (title and pickers), the plan panel.

function showStatus() {
  const view = shownView();
  const linked = page.link.startsWith("connected");
  $("status").textContent = linked && view ? view.status : page.link;
}

function setLink(text) {
  page.link = text;
  showStatus();
}

/** A one-off message on the status line (until the next change of state). */
function tell(text) {
  $("status").textContent = text;
}

function setStatus(view, text) {
  view.status = text;
  if (view.shown) showStatus();
}

function titleOf(session) {
  return session?.title?.trim() || "New session";
}

function folderName(cwd) {
  return (cwd ?? "").split("/").filter(Boolean).pop() ?? cwd ?? "";
}

function renderSessions() {
  const sessions = [...page.listed.values()].sort((a, b) => (b.updatedAt ?? 0) - (a.updatedAt ?? 0));
  const items = sessions.map((session) => {
    const open = el("button", "", [
      el("span", "session-name", [titleOf(session)]),
      el("span", "session-folder", [folderName(session.cwd)]),
    ]);
    open.dataset.session = session.sessionId;
    open.title = `${session.cwd}\n${session.sessionId}`;
    if (session.sessionId === page.shown) open.setAttribute("aria-current", "true");
    open.onclick = () => openSession(session.sessionId).catch((error) => tell(error.message));
    return el("li", "", [open]);
  });
  $("sessions").replaceChildren(...items);
}

function renderTitle() {
  const view = shownView();
  const title = view ? titleOf(page.listed.get(view.sessionId) ?? view) : "No session open";
  $("session-title").textContent = title;
  $("session-title").title = title;
  document.title = view ? `${title} · Talaria` : "Talaria";
}

/** The agent's title for a session (`session_info_update`), listed and shown at once. */
function titled(sessionId, title) {
  const listed = page.listed.get(sessionId);
  if (listed) listed.title = title;
  const view = page.views.get(sessionId);
  if (view) view.title = title;
  renderSessions();
  if (sessionId === page.shown) renderTitle();
}

/** A select for one config option (flat or grouped choices). */
function picker(view, option) {
  const select = el("select");
  select.dataset.config = option.id;
  select.title = option.description ?? option.name;
  const choice = (item) => {
    const node = el("option", "", [item.name ?? item.value]);
    node.value = item.value;
    if (item.description) node.title = item.description;
    return node;
  };
  for (const item of option.options ?? []) {
    if (!Array.isArray(item.options)) {
      select.append(choice(item));
      continue;
    }
    const group = el("optgroup", "", item.options.map(choice));
    group.label = item.name ?? item.group ?? "";
    select.append(group);
  }
  select.value = option.currentValue;
  select.onchange = () => setOption(view, option.id, select.value);
  return el("label", "picker", [el("span", "", [option.name]), select]);
}

/** A select for the legacy session modes, when the agent offers no config options. */
function modePicker(view) {
  return picker(view, {
    id: "mode",
    name: "Mode",
    currentValue: view.modes.currentModeId,
    options: view.modes.availableModes.map((m) => ({ value: m.id, name: m.name, description: m.description })),
  });
}

function renderPickers() {
  const view = shownView();
  if (!view) return $("pickers").replaceChildren();
  const pickers = view.configOptions.filter((o) => o.type === "select").map((o) => picker(view, o));
  if (!pickers.length && view.modes?.availableModes?.length) pickers.push(modePicker(view));
  $("pickers").replaceChildren(...pickers);
}

async function setOption(view, configId, value) {
  try {
    if (view.configOptions.some((o) => o.id === configId)) {
      const result = await page.connection.request("session/set_config_option", {
        sessionId: view.sessionId,
        configId,
        value,
      });
      view.settings(result);
    } else {
      await page.connection.request("session/set_mode", { sessionId: view.sessionId, modeId: value });
      view.modeSwitched(value);
    }
  } catch (error) {
    if (isDetached(error)) catchUp(view);
    else setStatus(view, `could not set ${configId}: ${error.message}`);
  }
  if (view.shown) renderPickers();
}

const PLAN_MARKS = { completed: "☑", in_progress: "◐", pending: "☐" };

function renderPlan() {
  const entries = shownView()?.plan ?? [];
  $("plan").hidden = entries.length === 0;
  const done = entries.filter((e) => e.status === "completed").length;
  $("plan-progress").textContent = `${done} of ${entries.length} done`;
  const items = entries.map((entry) => {
    const item = el("li", "", [el("span", "mark", [PLAN_MARKS[entry.status] ?? "☐"]), el("span", "", [entry.content])]);
    item.dataset.status = entry.status;
    if (entry.priority) item.dataset.priority = entry.priority;
    return item;
  });
  $("plan-entries").replaceChildren(...items);
}

/** Who is attached to the shown session and who has control; the button that takes it. */
function renderAttached() {
  const view = shownView();
  const roster = view?.roster;
  $("attached").hidden = !roster;
  if (!roster) return;
  const clients = roster.clients ?? [];
  const named = (c) => `${c.name ?? c.clientId}${c.clientId === page.clientId ? " (this page)" : ""}`;
  const controller = clients.find((c) => c.clientId === roster.controller);
  if (view.ended) {
    $("attached-clients").textContent = "session deleted";
    $("attached-controller").textContent = "";
    $("take-control").hidden = true;
    return;
  }
  $("attached-clients").textContent = `${clients.length} attached: ${clients.map(named).join(", ")}`;
  $("attached-controller").textContent = controller ? `control: ${named(controller)}` : "no one has control";
  $("take-control").hidden = view.controls;
}

async function takeControl() {
  const view = shownView();
  if (!view) return;
  try {
    const result = await page.connection.request("_session/attach", { sessionId: view.sessionId, role: "controller" });
    view.roster = result._meta?.["talaria/attachment"] ?? view.roster;
  } catch (error) {
    setStatus(view, `could not take control: ${error.message}`);
  }
  if (view.shown) renderAttached();
}

/** What another client's turn does, as this page is told (it gets no answer of its own). */
function othersTurn(view, turn) {
  view.running = turn.state === "running";
  setStatus(view, view.running ? `${turn.promptedBy} runs a turn…` : `turn ended: ${turn.stopReason ?? "error"}`);
  if (view.shown) renderRunning();
}

function renderRunning() {
  const view = shownView();
  const running = Boolean(view?.running);
  $("cancel").disabled = !running;
  $("send").textContent = running ? "Steer" : "Send";
  $("transcript").dataset.running = String(running);
}

/** Shows `view` in the chat. */
function show(view) {
  page.shown = view.sessionId;
  $("transcript").replaceChildren(view.root);
  $("transcript").dataset.session = view.sessionId;
  closeCommands();
  renderRunning();
  renderTitle();
  renderPickers();
  renderPlan();
  renderAttached();
  renderSessions();
  showStatus();
  view.scrollDown();
}

// ---------------------------------------------------------------------------------------
// Session updates and the agent's questions.

function onUpdate({ sessionId, update }) {
  if (update.sessionUpdate === "session_info_update" && "title" in update) titled(sessionId, update.title);
  const view = page.views.get(sessionId);
  if (!view) {
    const early = page.early.get(sessionId) ?? [];
    if (early.length < EARLY_UPDATES) page.early.set(sessionId, [...early, update]);
    return;
  }
  apply(view, update);
}

function apply(view, update) {
  const text = update.content?.type === "text" ? update.content.text : "";
  switch (update.sessionUpdate) {
    case "user_message_chunk":
      return view.append(update._meta?.talaria?.steered ? "steered" : "user", text, update.messageId);
    case "agent_message_chunk":
      return view.append("agent", text, update.messageId);
    case "agent_thought_chunk":
      return view.append("thought", text, update.messageId);
    case "tool_call":
      return view.card(update);
    case "tool_call_update": {
      const card = view.card(update);
      const resolved = update._meta?.["talaria/permissionResolved"];
      return resolved ? showResolved(card, resolved) : card;
    }
    case "notice":
      return view.notice(update.description ? `${update.title}: ${update.description}` : update.title ?? "");
    case "plan":
      view.plan = update.entries ?? [];
      return view.shown && renderPlan();
    case "available_commands_update":
      view.commands = update.availableCommands ?? [];
      return view.shown && updateCommands();
    case "current_mode_update":
      view.modeSwitched(update.currentModeId);
      return view.shown && renderPickers();
    case "config_option_update":
      view.settings(update);
      return view.shown && renderPickers();
    case "session_info_update":
      if (update._meta?.["talaria/turn"]) othersTurn(view, update._meta["talaria/turn"]);
      if (update._meta?.["talaria/attachment"]) rosterTold(view, update._meta["talaria/attachment"]);
      return view.shown && renderAttached();
    default:
      return undefined;
  }
}

/**
 * A new roster; one saying the server detached this page (it fell behind) starts a catch-up;
 * one saying the session ended (deleted where it ran, while this page followed it from
 * another process) says so once.
 */
function rosterTold(view, roster) {
  view.roster = roster;
  if (roster.detached && roster.detached.clientId === page.clientId) catchUp(view);
  if (roster.ended && !view.ended) {
    view.ended = true;
    view.notice(roster.ended.message ?? "This session ended.");
    setStatus(view, roster.ended.reason === "deleted" ? "session deleted: followed no more" : "session ended");
  }
}

/** Whether `error` is the server's answer to a page it detached (it fell behind). */
function isDetached(error) {
  return error?.code === -32003 && error.data?.talaria?.detached === true;
}

const pause = (ms) => new Promise((done) => setTimeout(done, ms));

/**
 * The server detached this page from `view`'s session because it fell behind: the page says
 * so and attaches again as an observer, which replays the session before it answers; the
 * transcript is emptied first, so nothing is shown twice. One catch-up at a time, a few
 * tries; when none works, the transcript as it was comes back with why.
 */
async function catchUp(view, note = null) {
  if (view.catchingUp) {
    if (note) view.notice(note);
    return;
  }
  view.catchingUp = true;
  const before = [...view.root.childNodes];
  let failure = null;
  for (let attempt = 1; attempt <= CATCH_UP_TRIES; attempt++) {
    view.clear();
    view.notice(FELL_BEHIND);
    if (note) view.notice(note);
    const retry = attempt > 1 ? ` (try ${attempt} of ${CATCH_UP_TRIES})` : "";
    setStatus(view, `this page fell behind the session: catching up${retry}…`);
    try {
      joined(view, await page.connection.request("_session/attach", { sessionId: view.sessionId, role: "observer" }));
      failure = null;
      break;
    } catch (error) {
      failure = error;
      if (attempt < CATCH_UP_TRIES) await pause(500 * attempt);
    }
  }
  view.catchingUp = false;
  if (failure) gaveUp(view, before, failure);
  else setStatus(view, "caught up: this page had fallen behind, and follows the session again");
  if (view.shown) show(view);
}

/** No attach worked: the transcript as it was, and why this page no longer follows. */
function gaveUp(view, before, failure) {
  view.root.replaceChildren(...before);
  view.last = null;
  view.notice(
    `This page fell behind the session and could not attach again (${CATCH_UP_TRIES} tries: ` +
      `${failure.message}). It no longer follows the session: reload the page to follow it again.`,
  );
  setStatus(view, `fell behind, could not catch up: ${failure.message}`);
}

/**
 * This page's prompt or steer was refused because the server had detached it (it fell
 * behind): the text goes back into the prompt box, and the page catches up.
 */
function notSent(view, text) {
  const box = $("prompt");
  if (view.shown && !box.value.trim()) box.value = text;
  catchUp(view, `Not sent: “${text}”. This page had fallen behind; your message is back in the prompt box: send it again.`);
}

/** Opens a view for a session (and applies what arrived for it before). */
function opened(sessionId, cwd, result) {
  const view = new SessionView({ sessionId, cwd, title: page.listed.get(sessionId)?.title ?? null });
  page.views.set(sessionId, view);
  for (const update of page.early.get(sessionId) ?? []) apply(view, update);
  page.early.delete(sessionId);
  if (result) view.settings(result);
  return view;
}

function contentNode(item) {
  if (item.type === "diff") return diffNode(item);
  if (item.type === "content" && item.content?.type === "text") return el("pre", "", [item.content.text]);
  if (item.type === "terminal") return el("pre", "", [`(terminal ${item.terminalId})`]);
  return el("pre", "", [JSON.stringify(item)]);
}

// A diff as removed and added lines, by the longest common run of lines.
function diffNode({ path, oldText, newText }) {
  const before = (oldText ?? "").split("\n");
  const after = (newText ?? "").split("\n");
  const keep = commonLines(before, after);
  const lines = [];
  let [i, j] = [0, 0];
  for (const [k, l] of keep) {
    while (i < k) lines.push(el("span", "removed", [`-${before[i++]}`]));
    while (j < l) lines.push(el("span", "added", [`+${after[j++]}`]));
    lines.push(el("span", "", [` ${before[i]}`]), "\n");
    i++;
    j++;
  }
  while (i < before.length && oldText) lines.push(el("span", "removed", [`-${before[i++]}`]));
  while (j < after.length) lines.push(el("span", "added", [`+${after[j++]}`]));
  const pre = el("pre", "diff", lines);
  pre.dataset.path = path;
  return el("div", "", [el("div", "path", [path]), pre]);
}

function commonLines(a, b) {
  if (a.length * b.length > 250000) return [];
  const table = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const pairs = [];
  let [i, j] = [0, 0];
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) pairs.push([i++, j++]);
    else if (table[i + 1][j] >= table[i][j + 1]) i++;
    else j++;
  }
  return pairs;
}

/**
 * A permission question, on the call's card, in the agent's words: a title that is itself a
 * question (a plan's "Implement this plan?") is asked as it is; otherwise the card names the
 * call and the question is whether to allow it. Each of the agent's options is a button.
 */
// Questions open on this page, by the request's id: another client may answer first, and
// the server then withdraws them here (`$/cancel_request`).
const openQuestions = new Map();

function askPermission({ sessionId, toolCall, options }, requestId) {
  const view = page.views.get(sessionId);
  if (!view) return { outcome: { outcome: "cancelled" } };
  const card = view.card({ ...toolCall, toolCallId: toolCall.toolCallId });
  const title = (toolCall.title ?? card.title ?? "").trim();
  const asked = title.endsWith("?") ? title : "Allow this call?";
  return new Promise((resolve) => {
    const buttons = options.map((option) => {
      const button = el("button", "", [option.name]);
      button.type = "button";
      button.dataset.option = option.kind;
      button.dataset.optionId = option.optionId;
      button.onclick = () => {
        openQuestions.delete(requestId);
        question.replaceWith(el("div", "answered", [`${asked} ${option.name}`]));
        resolve({ outcome: { outcome: "selected", optionId: option.optionId } });
      };
      return button;
    });
    const question = el("div", "question", [el("span", "asked", [asked]), el("span", "choices", buttons)]);
    question.setAttribute("role", "group");
    question.setAttribute("aria-label", asked);
    card.node.append(question);
    openQuestions.set(requestId, question);
    view.scrollDown();
  });
}

/** A question another client answered first: it goes (its request stays unanswered). */
function withdrawQuestion({ requestId }) {
  openQuestions.get(requestId)?.remove();
  openQuestions.delete(requestId);
}

/** Who answered a call's question (`_meta["talaria/permissionResolved"]`), on its card. */
function showResolved(card, { by, outcome }) {
  card.node.querySelector(".question")?.remove();
  const said = outcome?.optionId ?? outcome?.outcome ?? "answered";
  const line = el("div", "resolved", [`Answered by ${by?.name ?? by?.clientId ?? "another client"}: ${said}`]);
  card.node.querySelector(".resolved")?.remove();
  card.node.dataset.answeredBy = by?.name ?? "";
  card.node.append(line);
}

// ---------------------------------------------------------------------------------------
// The slash-command list: the agent's commands, offered as `/` is typed.

const commandList = { open: false, active: 0, matches: [] };

function updateCommands() {
  const view = shownView();
  const typed = $("prompt").value.match(/^\/(\S*)$/);
  const matches = typed && view ? view.commands.filter((c) => c.name.startsWith(typed[1])) : [];
  commandList.matches = matches;
  commandList.open = matches.length > 0;
  commandList.active = Math.min(commandList.active, Math.max(matches.length - 1, 0));
  $("commands").hidden = !commandList.open;
  const items = matches.map((command, index) => {
    const hint = command.input?.hint ? ` ${command.input.hint}` : "";
    const item = el("li", "", [
      el("span", "command-name", [`/${command.name}`]),
      el("span", "command-hint", [hint]),
      el("span", "command-description", [command.description ?? ""]),
    ]);
    item.dataset.command = command.name;
    item.setAttribute("role", "option");
    item.setAttribute("aria-selected", String(index === commandList.active));
    item.onmousedown = (event) => {
      event.preventDefault();
      pickCommand(command);
    };
    return item;
  });
  $("commands").replaceChildren(...items);
}

function closeCommands() {
  commandList.open = false;
  commandList.active = 0;
  $("commands").hidden = true;
}

function pickCommand(command) {
  $("prompt").value = `/${command.name} `;
  closeCommands();
  $("prompt").focus();
}

function onPromptKey(event) {
  if (commandList.open) {
    const count = commandList.matches.length;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      commandList.active = (commandList.active + (event.key === "ArrowDown" ? 1 : count - 1)) % count;
      return updateCommands();
    }
    if (event.key === "Tab" || (event.key === "Enter" && !event.shiftKey)) {
      event.preventDefault();
      return pickCommand(commandList.matches[commandList.active]);
    }
    if (event.key === "Escape") {
      event.preventDefault();
      return closeCommands();
    }
  }
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("prompt-form").requestSubmit();
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------
// Connecting, the sessions, prompts.

// The token comes in the address's fragment (never sent to the server) or is typed.
function tokenFromAddress() {
  const match = location.hash.match(/token=([^&]+)/);
  const session = location.hash.match(/session=([^&]+)/);
  if (session) page.attachTo = decodeURIComponent(session[1]);
  if (!match) return "";
  history.replaceState(null, "", location.pathname);
  return decodeURIComponent(match[1]);
}

async function connect() {
  const token = $("token").value.trim();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const connection = new AcpConnection(`${scheme}//${location.host}/acp`, token);
  connection.onStatus = (text) => setLink(text === "connected" && page.connection ? page.agentLink : text);
  connection.onNotification("session/update", onUpdate);
  connection.onRequest("session/request_permission", askPermission);
  connection.onNotification("$/cancel_request", withdrawQuestion);
  try {
    setLink("connecting…");
    await connection.open();
    const init = await connection.request("initialize", {
      protocolVersion: 1,
      // Notices (warnings, errors) as their own updates rather than as answer text.
      clientCapabilities: { session: { notices: {} } },
      clientInfo: { name: "talaria-web", version: "1" },
    });
    page.connection = connection;
    page.clientId = init._meta?.sessionAttach?.clientId ?? null;
    page.agentLink = `connected to ${init.agentInfo?.name ?? "the agent"}`;
    setLink(page.agentLink);
    $("connect").hidden = true;
    $("workspace").hidden = false;
    await listSessions();
    if (page.attachTo) await attachSession(page.attachTo);
  } catch (error) {
    setLink(`cannot connect: ${error.message}`);
  }
}

/** Attaches to a session another client runs (from a link): its history, then live. */
async function attachSession(sessionId) {
  const view = opened(sessionId, page.listed.get(sessionId)?.cwd, null);
  view.role = "observer";
  view.root.dataset.role = "observer";
  view.status = "attaching…";
  show(view);
  try {
    joined(view, await page.connection.request("_session/attach", { sessionId, role: "observer" }));
    setStatus(view, "attached");
  } catch (error) {
    setStatus(view, `could not attach: ${error.message}`);
  }
  if (view.shown) {
    renderPickers();
    renderAttached();
  }
}

/** Takes in an attach's answer: the session's settings, the roster, this page's id. */
function joined(view, result) {
  view.settings(result);
  view.roster = result._meta?.["talaria/attachment"] ?? view.roster;
  if (result.clientId) page.clientId = result.clientId;
}

async function listSessions() {
  const { sessions } = await page.connection.request("session/list", {});
  for (const session of sessions) {
    const known = page.listed.get(session.sessionId);
    page.listed.set(session.sessionId, {
      sessionId: session.sessionId,
      cwd: session.cwd,
      title: session.title ?? known?.title ?? null,
      updatedAt: Date.parse(session.updatedAt ?? "") || known?.updatedAt || 0,
    });
  }
  renderSessions();
}

async function newSession() {
  const cwd = $("cwd").value.trim();
  if (!cwd.startsWith("/")) {
    tell("the folder must be an absolute path");
    return;
  }
  const result = await page.connection.request("session/new", { cwd, mcpServers: [] });
  page.listed.set(result.sessionId, { sessionId: result.sessionId, cwd, title: null, updatedAt: Date.now() });
  const view = opened(result.sessionId, cwd, result);
  view.status = "ready";
  show(view);
}

async function openSession(sessionId) {
  const known = page.views.get(sessionId);
  if (known) return show(known);
  const cwd = page.listed.get(sessionId)?.cwd;
  const view = opened(sessionId, cwd, null);
  view.status = "loading…";
  show(view);
  try {
    const result = await page.connection.request("session/load", { sessionId, cwd, mcpServers: [] });
    view.settings(result);
    setStatus(view, "loaded");
  } catch (error) {
    setStatus(view, `could not load it: ${error.message}`);
  }
  if (view.shown) renderPickers();
  return undefined;
}

async function send(event) {
  event.preventDefault();
  const view = shownView();
  const text = $("prompt").value.trim();
  if (!text || !view) return;
  if (view.ended) {
    // Deleted where it ran: nothing to send it to; the text stays in the box.
    setStatus(view, "not sent: this session was deleted (start a new session to go on)");
    return;
  }
  $("prompt").value = "";
  closeCommands();
  const prompt = [{ type: "text", text }];
  if (view.running) {
    // A message typed while a turn runs steers it (it enters where the turn is).
    try {
      await page.connection.request("_session/steering", { sessionId: view.sessionId, prompt });
    } catch (error) {
      if (isDetached(error)) notSent(view, text);
      else setStatus(view, `could not steer: ${error.message}`);
    }
    return;
  }
  view.last = null;
  view.append("user", text);
  view.last = null;
  view.running = true;
  setStatus(view, "turn running…");
  if (view.shown) renderRunning();
  try {
    const { stopReason } = await page.connection.request("session/prompt", { sessionId: view.sessionId, prompt });
    setStatus(view, `turn ended: ${stopReason}`);
  } catch (error) {
    if (isDetached(error)) notSent(view, text);
    else setStatus(view, `the prompt failed: ${error.message}`);
  } finally {
    view.running = false;
    if (view.shown) renderRunning();
  }
}

$("token").value = tokenFromAddress();
$("connect-button").onclick = connect;
$("new-session").onclick = () => newSession().catch((error) => tell(`could not start a session: ${error.message}`));
$("prompt-form").onsubmit = send;
$("take-control").onclick = takeControl;
$("prompt").addEventListener("input", updateCommands);
$("prompt").addEventListener("keydown", onPromptKey);
$("prompt").addEventListener("blur", closeCommands);
$("cancel").onclick = () => {
  const view = shownView();
  if (view) page.connection.notify("session/cancel", { sessionId: view.sessionId });
};
// Tests drop the socket as a network failure would (the connection is kept).
window.addEventListener("talaria-test-interrupt", () => page.connection?.interrupt());
if ($("token").value) connect();
