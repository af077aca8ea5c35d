// The messages between the extension host and the chat webview (both directions).

export type FromView =
  | { type: "ready" }
  | {
      type: "prompt";
      text: string;
      /** Workspace-relative paths mentioned with @. */
      mentions: string[];
      images: { mimeType: string; data: string }[];
    }
  | {
      /** A message typed while a turn runs: into the turn (`steer`) or after it (`queue`). */
      type: "steer" | "queue";
      text: string;
      mentions: string[];
      images: { mimeType: string; data: string }[];
    }
  | { type: "stop" }
  /** Back to before a sent message; with `restoreFiles`, its turns' file changes undone. */
  | { type: "rewind"; itemId: string; restoreFiles: boolean }
  /** A sent message edited: back to before it, then the new text sent in its place. */
  | {
      type: "edit";
      itemId: string;
      text: string;
      mentions: string[];
      images: { mimeType: string; data: string }[];
    }
  | { type: "permission"; toolCallId: string; optionId: string }
  | { type: "question"; id: string; action: "accept" | "decline" | "cancel"; content?: Record<string, unknown> }
  | { type: "openDiff"; toolCallId: string; index: number }
  | { type: "setOption"; configId: string; value: string }
  | { type: "newSession" }
  /** An attached session: take control of it, or leave it (back to a local session). */
  | { type: "takeControl" }
  | { type: "leave" }
  | { type: "listSessions" }
  | { type: "loadSession"; sessionId: string }
  | { type: "searchFiles"; query: string }
  | { type: "command"; command: string };

export type HeaderOption = { id: string; name: string; value: string; choices: { value: string; name: string }[] };

export type ToView =
  | { type: "reset"; items: { id: string; html: string }[] }
  | { type: "item"; id: string; html: string }
  | {
      type: "header";
      busy: boolean;
      usage: string;
      plan: string;
      title: string;
      commands: { name: string; description: string; hint: string }[];
      options: HeaderOption[];
      acceptsImages: boolean;
      canList: boolean;
      canSteer: boolean;
      canRewind: boolean;
      /** A session attached to in a `talaria serve`: who is attached, who has control. */
      /** `controller`: this window has control; `offerControl`: the Take control button shows. */
      attachment?: { clients: string; control: string; turn: string; controller: boolean; offerControl: boolean };
    }
  | { type: "sessions"; sessions: { id: string; title: string; updatedAt: string }[] }
  | { type: "files"; files: string[] }
  /** An accepted answer that does not fit its form: the form stays open and says why. */
  | { type: "questionProblem"; id: string; problem: string };
