import ArgumentParser
import Crypto
import Foundation
import IAPProtocol
import JSONRPC

/// Reads a receipt argument: a file of base64 text or raw PKCS#7 bytes, or `-` for standard input.
func receiptBase64(_ path: String) throws -> String {
    let data: Data
    if path == "-" {
        data = FileHandle.standardInput.readDataToEndOfFile()
    } else {
        guard let contents = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read \(path)") }
        data = contents
    }
    let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    return !text.isEmpty && Data(base64Encoded: text) != nil ? text : data.base64EncodedString()
}

func redeemSummary(_ r: RedeemResult) -> String {
    var out = table(
        ["transaction", "original", "product", "outcome", "finish?"],
        r.results.map {
            [$0.transactionId, $0.originalTransactionId, $0.productId, $0.outcome.rawValue, $0.finishable ? "yes" : "no"]
        })
    out += "\n" + balanceLine(r.balance, owed: r.owed, r.environment)
    if !r.entitlements.isEmpty { out += "\n" + entitlementsTable(r.entitlements) }
    return out
}

/// `balance 70 coins (Production)`, with what is owed when anything is.
func balanceLine(_ balance: Int64, owed: Int64, _ scope: AccountScope) -> String {
    "balance \(balance) coins (\(scope.rawValue))"
        + (owed > 0 ? "; \(owed) owed for refunded coins (repaid from the next grants; spending is blocked until then)" : "")
}

/// `--environment`: which scope of the account a command reads or spends.
struct ScopeOption: ParsableArguments {
    @Option(help: "Production (default) or Sandbox: Sandbox, TestFlight and Xcode purchases have their own balance, ledger and entitlements.")
    var environment: String?

    func validate() throws {
        if let environment, AccountScope(rawValue: environment) == nil {
            throw ValidationError("--environment must be Production or Sandbox")
        }
    }

    var scope: AccountScope? { environment.flatMap(AccountScope.init(rawValue:)) }
}

func entitlementsTable(_ entitlements: [Entitlement]) -> String {
    table(
        ["entitlement", "product", "expires", "original transaction"],
        entitlements.map {
            [$0.entitlement, $0.productId, $0.expiresAtMs.map { isoTime($0) } ?? "never", $0.originalTransactionId]
        })
}

struct PurchaseInput: ParsableArguments {
    @Option(help: "App receipt file (base64 or binary; - for standard input).") var receipt: String?
    @Option(name: .customLong("signed-transaction"), help: "A StoreKit 2 signed transaction (JWS). Repeatable.")
    var signedTransactions: [String] = []
    @Option(name: .customLong("device-identifier"), help: "identifierForVendor, to check the receipt's device hash.")
    var deviceIdentifier: String?
    @Option(help: "Which scope's balance and entitlements to show after: Production or Sandbox (default: where the purchases went).")
    var environment: String?
    @Option(
        name: .customLong("transaction-id"),
        help:
            "A StoreKit 2 transaction id, fetched from Apple by the server (App Store Server API). redeem: repeatable; restore: one, and the customer's whole history is read."
    )
    var transactionIds: [String] = []
    @Option(
        name: .customLong("play-token"),
        help: "A Google Play purchase as PRODUCT:PURCHASE_TOKEN (e.g. from `iap play buy`); the server asks Google about it. Repeatable.")
    var playTokens: [String] = []

    /// `--play-token PRODUCT:TOKEN` as the redeem's `googlePlay`.
    var googlePlay: [GooglePlayPurchase] {
        playTokens.compactMap { text in
            text.firstIndex(of: ":").map { GooglePlayPurchase(productId: String(text[..<$0]), purchaseToken: String(text[text.index(after: $0)...])) }
        }
    }

    func validate() throws {
        guard receipt != nil || !signedTransactions.isEmpty || !transactionIds.isEmpty || !playTokens.isEmpty else {
            throw ValidationError(
                "give --receipt FILE, --signed-transaction JWS, --transaction-id ID (e.g. from `iap sim buy --json`) or --play-token PRODUCT:TOKEN")
        }
        guard googlePlay.count == playTokens.count else { throw ValidationError("--play-token is PRODUCT:PURCHASE_TOKEN") }
        if let environment, AccountScope(rawValue: environment) == nil {
            throw ValidationError("--environment must be Production or Sandbox")
        }
    }

    /// `restore`: the one transaction id names a history; `redeem`: each is fetched.
    func params(session: String, restore: Bool) throws -> RedeemParams {
        if restore, transactionIds.count > 1 { throw ValidationError("restore takes one --transaction-id: the whole history is read from it") }
        return RedeemParams(
            session: session, receiptData: try receipt.map(receiptBase64),
            signedTransactions: signedTransactions.isEmpty ? nil : signedTransactions, deviceIdentifier: deviceIdentifier,
            environment: environment.flatMap(AccountScope.init(rawValue:)),
            transactionIds: restore || transactionIds.isEmpty ? nil : transactionIds, transactionId: restore ? transactionIds.first : nil,
            googlePlay: googlePlay.isEmpty ? nil : googlePlay)
    }
}

/// `iap redeem` and `iap restore`: the same input, two methods.
protocol PurchaseCommand: AsyncParsableCommand {
    associatedtype Method: RPCMethod where Method.Params == RedeemParams, Method.Result == RedeemResult
    var input: PurchaseInput { get }
    var client: ClientOptions { get }
}

extension PurchaseCommand {
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, Method.self, try input.params(session: try client.requireSession(), restore: Method.name == FulfillmentRestore.name),
            human: redeemSummary)
    }
}

struct RedeemCommand: PurchaseCommand {
    typealias Method = FulfillmentRedeem
    static let configuration = CommandConfiguration(
        commandName: "redeem", abstract: "Redeem a receipt, signed transactions or transaction ids: each purchase is granted exactly once.")
    @OptionGroup var input: PurchaseInput
    @OptionGroup var client: ClientOptions
}

struct RestoreCommand: PurchaseCommand {
    typealias Method = FulfillmentRestore
    static let configuration = CommandConfiguration(
        commandName: "restore", abstract: "Restore entitlements from a receipt, or from Apple's history by --transaction-id (never coins).")
    @OptionGroup var input: PurchaseInput
    @OptionGroup var client: ClientOptions
}

struct BalanceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "balance", abstract: "Your coin balance.")
    @OptionGroup var scope: ScopeOption
    @OptionGroup var client: ClientOptions
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentGetBalance.self,
            .init(session: try client.requireSession(), environment: scope.scope)
        ) {
            "\($0.balance) coins (\($0.environment.rawValue))" + ($0.owed > 0 ? "; \($0.owed) owed for refunded coins" : "")
        }
    }
}

struct EntitlementsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "entitlements", abstract: "What you own now, and your balance.")
    @OptionGroup var scope: ScopeOption
    @OptionGroup var client: ClientOptions
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentGetEntitlements.self,
            .init(session: try client.requireSession(), environment: scope.scope)
        ) {
            ($0.entitlements.isEmpty ? "no entitlements" : entitlementsTable($0.entitlements)) + "\n"
                + balanceLine($0.balance, owed: $0.owed, $0.environment)
        }
    }
}

struct LedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ledger", abstract: "Your coin ledger, oldest first.")
    @Option(help: "Show entries after this entry id.") var after: Int64?
    @Option(help: "Entries per page (1-500).") var limit: Int = 50
    @OptionGroup var scope: ScopeOption
    @OptionGroup var client: ClientOptions
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentListLedger.self,
            .init(
                session: try client.requireSession(), after: after, limit: limit,
                environment: scope.scope)
        ) { page in
            table(
                ["id", "when", "kind", "delta", "balance", "owed", "transaction", "memo"],
                page.entries.map {
                    [
                        String($0.id), isoTime($0.createdAtMs), $0.kind.rawValue, $0.delta > 0 ? "+\($0.delta)" : String($0.delta),
                        String($0.balance),
                        String($0.owed ?? 0), $0.transactionId ?? "-",
                        ($0.memo ?? "") + ($0.shortfall.map { " (\($0) could not be taken back: owed)" } ?? "")
                            + ($0.recovered.map { " (repaid \($0) owed)" } ?? ""),
                    ]
                }) + (page.next.map { "\nmore: iap ledger --after \($0)" } ?? "")
        }
    }
}

struct SpendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "spend", abstract: "Spend coins. Retrying with the same --key never spends twice.")
    @Argument(help: "Coins to spend.") var amount: Int64
    @Option(help: "Idempotency key (default: a new random one; pass your own to retry safely).") var key: String?
    @Option(help: "What the coins are for.") var memo: String?
    @OptionGroup var scope: ScopeOption
    @OptionGroup var client: ClientOptions
    func run() async throws {
        let key = self.key ?? UUID().uuidString.lowercased()
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentSpendCoins.self,
            .init(
                session: try client.requireSession(), amount: amount, idempotencyKey: key, memo: memo,
                environment: scope.scope)
        ) {
            "spent \(amount) coins (key \(key)); balance \($0.balance) (\($0.environment.rawValue))"
        }
    }
}

struct ContentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "content", abstract: "Downloadable content you are entitled to.", subcommands: [List.self, Download.self, URLCommand.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Content you may download, with size and SHA-256.")
        @OptionGroup var scope: ScopeOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentListContent.self,
                .init(session: try client.requireSession(), environment: scope.scope)
            ) {
                $0.content.isEmpty
                    ? "no downloadable content"
                    : table(
                        ["content", "product", "bytes", "sha256"],
                        $0.content.map {
                            [$0.contentId, $0.productId, String($0.size), $0.sha256]
                        })
            }
        }
    }

    struct URLCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "url", abstract: "A short-lived signed URL the edge serves a content file at (HTTP ranges).")
        @Argument(help: "Content id (see `iap content list`).") var contentId: String
        @OptionGroup var scope: ScopeOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentContentURL.self,
                .init(session: try client.requireSession(), contentId: contentId, environment: scope.scope)
            ) { "\($0.url)\nexpires \(isoTime($0.expiresAtMs)), \($0.size) bytes, sha256 \($0.sha256)" }
        }
    }

    struct Download: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download content, resuming from OUTPUT.part, and check its SHA-256.",
            discussion: """
                With an edge (--edge or IAP_EDGE_URL): one HTTP GET of a signed URL (fulfillment.contentURL), resumed with \
                Range and If-Range. Without: chunks of fulfillment.readContent from the service. A progress bar on a \
                terminal; plain progress lines otherwise. Exit 1 if the checksum does not match.
                """)
        @Argument(help: "Content id (see `iap content list`).") var contentId: String
        @Option(help: "Where to write it (default: the content id, in the current directory).") var output: String?
        @Option(help: "Bytes per request (up to 1 MiB).") var chunk: Int = 256 * 1024
        @OptionGroup var scope: ScopeOption
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let destination = output ?? contentId
            let summary = try await ContentDownload(
                call: ServiceCall(options: client), session: try client.requireSession(),
                contentId: contentId, destination: destination, chunk: chunk, scope: scope.scope
            ).run()
            if client.json {
                let object: [String: Any] = [
                    "contentId": contentId, "path": destination, "size": summary.size, "sha256": summary.sha256,
                    "resumedFrom": summary.resumedFrom,
                ]
                print(String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self))
            } else {
                print("saved \(destination) (\(summary.size) bytes, sha256 \(summary.sha256) verified)")
            }
        }
    }
}

/// A resumable, checked download: bytes go to `destination.part` as they arrive; a later run resumes
/// from its size; the file is renamed into place only when its SHA-256 matches the server's.
struct ContentDownload {
    let call: ServiceCall
    let session: String
    let contentId: String
    let destination: String
    let chunk: Int
    var scope: AccountScope? = nil
    var progress: (Int64, Int64, Double) -> Void = ContentDownload.showProgress

    struct Summary { var size: Int64; var sha256: String; var resumedFrom: Int64 }

    func run() async throws -> Summary {
        if let edge = call.edgeClient() {
            defer { Task { await edge.shutdown() } }
            return try await runThroughEdge(edge)
        }
        let partial = destination + ".part"
        if !FileManager.default.fileExists(atPath: partial) {
            FileManager.default.createFile(atPath: partial, contents: nil, attributes: [.posixPermissions: 0o644])
        }
        guard let handle = FileHandle(forUpdatingAtPath: partial) else { throw CLIError.message("cannot write \(partial)") }
        var offset = Int64(try handle.seekToEnd())
        let resumedFrom = offset
        if offset > 0 { printError("resuming \(contentId) from byte \(offset) of \(partial)") }
        let started = Date()
        var size: Int64 = -1
        var sha = ""
        repeat {
            let (piece, _) = await call.call(
                .fulfillment, FulfillmentReadContent.self,
                .init(
                    session: session, contentId: contentId, offset: offset, length: min(chunk, 1 << 20),
                    environment: scope))
            if size >= 0, piece.sha256 != sha {
                try handle.close()
                try? FileManager.default.removeItem(atPath: partial)
                throw CLIError.message("\(contentId) changed on the server during the download; run the command again")
            }
            size = piece.size
            sha = piece.sha256
            guard offset <= size else {
                try handle.close()
                try? FileManager.default.removeItem(atPath: partial)
                throw CLIError.message("\(partial) is longer than \(contentId); removed it, run the command again")
            }
            guard let bytes = Data(base64Encoded: piece.data) else { throw CLIError.message("the server sent invalid base64") }
            try handle.write(contentsOf: bytes)
            offset += Int64(bytes.count)
            progress(offset - resumedFrom, size - resumedFrom, Date().timeIntervalSince(started))
            if bytes.isEmpty && offset < size { throw CLIError.message("the server sent no bytes at offset \(offset)") }
        } while offset < size
        try handle.close()
        if isatty(STDERR_FILENO) != 0 { printError("") }
        let actual = try Self.sha256(ofFile: partial)
        guard actual == sha else {
            try? FileManager.default.removeItem(atPath: partial)
            fail(
                "checksum mismatch for \(contentId): expected \(sha), got \(actual); the partial file was removed, run the command again",
                exit: ExitCodes.refused)
        }
        if FileManager.default.fileExists(atPath: destination) { try FileManager.default.removeItem(atPath: destination) }
        try FileManager.default.moveItem(atPath: partial, toPath: destination)
        return Summary(size: size, sha256: sha, resumedFrom: resumedFrom)
    }

    /// The download as an app makes it: a signed URL from fulfillment (through the edge), then one GET, resumed
    /// from `destination.part` with `If-Range` set to the entity tag that part was written under (kept in
    /// `destination.part.etag`), so a file that changed on the server starts over instead of being spliced.
    func runThroughEdge(_ edge: EdgeClient) async throws -> Summary {
        let partial = destination + ".part"
        let tagFile = partial + ".etag"
        let (link, _) = await call.call(
            .fulfillment, FulfillmentContentURL.self, .init(session: session, contentId: contentId, environment: scope))
        if !FileManager.default.fileExists(atPath: partial) {
            FileManager.default.createFile(atPath: partial, contents: nil, attributes: [.posixPermissions: 0o644])
            try? FileManager.default.removeItem(atPath: tagFile)
        }
        guard let handle = FileHandle(forUpdatingAtPath: partial) else { throw CLIError.message("cannot write \(partial)") }
        var offset = Int64(try handle.seekToEnd())
        let savedTag = (try? String(contentsOfFile: tagFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        if savedTag == nil { offset = 0 }
        let resumedFrom = offset
        if offset > 0 { printError("resuming \(contentId) from byte \(offset) of \(partial)") }
        let started = Date()
        let fetched: EdgeClient.Fetched
        do {
            try "\"\(link.sha256)\"".write(toFile: tagFile, atomically: true, encoding: .utf8)
            fetched = try await edge.download(link.url, offset: offset, etag: savedTag, to: handle) { written in
                progress(written - resumedFrom, link.size - resumedFrom, Date().timeIntervalSince(started))
            }
        } catch EdgeClient.Failure.unreachable(let why) {
            try? handle.close()
            fail("the download from \(edge.base) stopped (\(why)); run the command again to resume", exit: ExitCodes.unreachable)
        }
        try handle.close()
        if isatty(STDERR_FILENO) != 0 { printError("") }
        // 416 for a resume of a part that is already whole; anything else not 200/206 is a refusal.
        guard [200, 206].contains(fetched.status) || (fetched.status == 416 && fetched.size == offset) else {
            fail("the edge refused the download: HTTP \(fetched.status)", exit: ExitCodes.refused)
        }
        let actual = try Self.sha256(ofFile: partial)
        guard actual == link.sha256 else {
            try? FileManager.default.removeItem(atPath: partial)
            try? FileManager.default.removeItem(atPath: tagFile)
            fail(
                "checksum mismatch for \(contentId): expected \(link.sha256), got \(actual); the partial file was removed, run the command again",
                exit: ExitCodes.refused)
        }
        try? FileManager.default.removeItem(atPath: tagFile)
        if FileManager.default.fileExists(atPath: destination) { try FileManager.default.removeItem(atPath: destination) }
        try FileManager.default.moveItem(atPath: partial, toPath: destination)
        return Summary(size: link.size, sha256: link.sha256, resumedFrom: fetched.status == 200 ? 0 : resumedFrom)
    }

    static func sha256(ofFile path: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw CLIError.message("cannot read \(path)") }
        defer { try? handle.close() }
        var hasher = SHA256()
        while let data = try handle.read(upToCount: 1 << 20), !data.isEmpty { hasher.update(data: data) }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// A bar with bytes, rate and ETA on a terminal (redrawn in place); one plain line per chunk otherwise.
    static func showProgress(done: Int64, total: Int64, seconds: Double) {
        fflush(nil)  // what was printed to stdout comes first, also when both are piped
        let rate = seconds > 0 ? Double(done) / seconds : 0
        let fraction = total > 0 ? Double(done) / Double(total) : 1
        let eta = rate > 0 ? Double(total - done) / rate : 0
        func mib(_ v: Double) -> String { String(format: "%.1f MiB", v / 1_048_576) }
        let figures = "\(mib(Double(done)))/\(mib(Double(total)))  \(mib(rate))/s  ETA \(String(format: "%.0f", eta)) s"
        if isatty(STDERR_FILENO) != 0 {
            let width = 30
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            FileHandle.standardError.write(Data("\r[\(bar)] \(String(format: "%3.0f", fraction * 100))%  \(figures)  ".utf8))
        } else {
            printError("downloaded \(String(format: "%.0f", fraction * 100))%  \(figures)")
        }
    }
}
