import AccountsService
import Foundation
import Hummingbird
import HummingbirdTLS
import IAPProtocol
import JSONRPC
import NIOSSL
import RPCTransport

/// The console's pages and forms: signing in and out, the overview, the operators' audit (customer pages: `CustomerPages`).
extension ConsoleService {
    public func router() -> Router<ConsoleRequestContext> {
        let router = Router(context: ConsoleRequestContext.self)
        router.get("/static/console.css") { _, _ in
            Response(
                status: .ok, headers: ConsoleHTTP.headers(contentType: "text/css; charset=utf-8"),
                body: .init(byteBuffer: ByteBuffer(string: ConsoleTemplates.css)))
        }
        router.get("/readyz") { _, _ in await self.readiness() }
        router.get("/sign-in") { _, _ in self.signInPage() }
        router.post("/sign-in") { request, context in try await self.signInPosted(request, context) }
        router.post("/sign-out") { request, context in
            try await self.posted(request, context, acting: false) { session, _ in
                if let token = ConsoleHTTP.cookie(self.sessionCookie, in: request) {
                    try await self.store.deleteSession(tokenHash: Self.tokenHash(token))
                }
                try await self.audit(session, "signOut", "", context)
                return ConsoleHTTP.redirect("/sign-in", setCookies: [self.cookie(self.sessionCookie, value: "", maxAgeSeconds: 0)])
            }
        }
        router.post("/sign-out-everywhere") { request, context in
            try await self.posted(request, context, acting: false) { session, _ in
                let ended = try await self.store.deleteSessions(operatorName: session.operatorName)
                try await self.audit(session, "signOutEverywhere", "\(ended) sessions", context)
                return ConsoleHTTP.redirect("/sign-in", setCookies: [self.cookie(self.sessionCookie, value: "", maxAgeSeconds: 0)])
            }
        }
        router.get("/") { request, _ in try await self.signedIn(request) { session in try await self.overview(session) } }
        router.get("/audit") { request, _ in
            try await self.signedIn(request) { session in
                // Who signed in from where, and every refusal: for admins.
                guard session.role == .admin else {
                    return self.problem(.forbidden, "Not allowed", "The operators' audit is for admins.", session: session)
                }
                return try await self.auditPage(request, session)
            }
        }
        router.get("/operators") { request, _ in
            try await self.signedIn(request) { session in
                guard session.role == .admin else { return self.problem(.forbidden, "Not allowed", "Operators are for admins.", session: session) }
                return try await self.operatorsPage(session, created: nil)
            }
        }
        router.post("/operators") { request, context in
            try await self.posted(request, context, acting: true) { session, form in
                guard session.role == .admin else {
                    try await self.audit(session, "actionRefused", request.uri.path, context)
                    return self.problem(.forbidden, "Not allowed", "Operators are for admins; nothing was done.", session: session)
                }
                return try await self.addOperatorPosted(form, session, context)
            }
        }
        router.get("/catalog") { request, _ in
            try await self.signedIn(request) { session in
                guard session.role == .admin else { return self.problem(.forbidden, "Not allowed", "The catalog is for admins.", session: session) }
                return try await self.catalogPage(request, session)
            }
        }
        router.post("/catalog") { request, context in
            try await self.posted(request, context, acting: true) { session, form in
                guard session.role == .admin else {
                    try await self.audit(session, "actionRefused", request.uri.path, context)
                    return self.problem(.forbidden, "Not allowed", "The catalog is for admins; nothing was done.", session: session)
                }
                return try await self.catalogPosted(request, form, session, context)
            }
        }
        router.get("/search") { request, _ in try await self.signedIn(request) { session in try await self.search(request, session) } }
        router.get("/customers/:id") { request, context in
            try await self.signedIn(request) { session in try await self.customerPage(context.parameters.get("id") ?? "", session) }
        }
        router.post("/customers/:id/confirm") { request, context in
            try await self.posted(request, context, acting: true) { session, form in
                try await self.confirmPage(context.parameters.get("id") ?? "", form, session)
            }
        }
        router.post("/customers/:id/do") { request, context in
            try await self.posted(request, context, acting: true) { session, form in
                try await self.act(context.parameters.get("id") ?? "", form, session, context)
            }
        }
        return router
    }

    /// The console on `host:port`: HTTPS/1.1 with `tls`, plain HTTP on loopback only (`ConsoleConfiguration.checkBind`).
    public func application(
        host: String, port: Int, tls: TLSConfiguration? = nil, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        try ConsoleConfiguration.checkBind(host: host, tls: tls != nil)
        return Application(
            router: router(),
            server: try tls.map { try .tls(.http1(), tlsConfiguration: $0) } ?? .http1(),
            configuration: .init(address: .hostname(host, port: port), serverName: "iap-console"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) }, logger: logger)
    }

    /// Ready when accounts and fulfillment answer (what every page needs): `{"accounts":"ok","fulfillment":"ok"}`, else 503.
    func readiness() async -> Response {
        var report: [String: String] = [:]
        for (name, client) in [("accounts", accounts), ("fulfillment", fulfillment)] {
            report[name] = (try? await client.call(RPCPing.self, EmptyParams(), timeout: .seconds(3))) == "pong" ? "ok" : "unreachable"
        }
        let ready = report.values.allSatisfy { $0 == "ok" }
        let body = "{" + report.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\"\($0.value)\"" }.joined(separator: ",") + "}"
        return Response(
            status: ready ? .ok : .serviceUnavailable, headers: ConsoleHTTP.headers(contentType: "application/json"),
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    // MARK: pages

    /// A page inside the layout; the layout shows the operator and the forms to sign out when signed in.
    func page(
        _ template: String, title: String, _ data: [String: Any], session: OperatorSession?, message: String? = nil,
        status: HTTPResponse.Status = .ok, setCookies: [String] = []
    ) -> Response {
        var layout: [String: Any] = ["title": title, "body": library.render(data, withTemplate: template) ?? ""]
        if let session {
            layout["operator"] = [
                "name": session.operatorName, "role": session.role.rawValue, "csrf": session.csrfToken, "isAdmin": session.role == .admin,
            ]
        }
        if let message { layout["message"] = message }
        return ConsoleHTTP.html(status, library.render(layout, withTemplate: "layout") ?? "", setCookies: setCookies)
    }

    func problem(_ status: HTTPResponse.Status, _ heading: String, _ detail: String, session: OperatorSession?) -> Response {
        page("problem", title: heading, ["heading": heading, "detail": detail], session: session, status: status)
    }

    func signInPage(message: String? = nil, status: HTTPResponse.Status = .ok) -> Response {
        let csrf = SessionTokens.generate()
        return page(
            "signIn", title: "Sign in", ["csrf": csrf], session: nil, message: message, status: status,
            setCookies: [cookie(self.signInCookie, value: csrf, maxAgeSeconds: 3600)])
    }

    func signInPosted(_ request: Request, _ context: ConsoleRequestContext) async throws -> Response {
        let form = try await ConsoleHTTP.form(request, maxBytes: configuration.maxFormBytes)
        // The sign-in form's token is the one its own cookie carries: another site cannot sign someone in as itself.
        guard let expected = ConsoleHTTP.cookie(self.signInCookie, in: request), Self.tokensMatch(form["csrf"], expected) else {
            return problem(
                .forbidden, "Refused", "This form did not come from the console or has expired: open the sign-in page again.", session: nil)
        }
        let outcome = try await signIn(
            username: form["username"] ?? "", password: form["password"] ?? "", code: form["code"] ?? "", address: context.address)
        switch outcome {
        case .signedIn(let token):
            let maxAge = configuration.sessionAbsoluteMs / 1000
            return ConsoleHTTP.redirect(
                "/",
                setCookies: [cookie(self.sessionCookie, value: token, maxAgeSeconds: maxAge), cookie(self.signInCookie, value: "", maxAgeSeconds: 0)])
        case .refused: return signInPage(message: "Wrong username, password or code.", status: .unauthorized)
        case .throttled(let ms):
            return signInPage(message: "Too many attempts: try again in \((ms + 999) / 1000) seconds.", status: .tooManyRequests)
        }
    }

    /// Runs `body` for a signed-in operator; anyone else goes to the sign-in page.
    func signedIn(_ request: Request, _ body: (OperatorSession) async throws -> Response) async throws -> Response {
        guard let session = try await session(token: ConsoleHTTP.cookie(self.sessionCookie, in: request)) else {
            return ConsoleHTTP.redirect("/sign-in")
        }
        return try await body(session)
    }

    /// A form's POST: signed in, carrying the session's CSRF token, and from a role that may act when `acting`.
    func posted(
        _ request: Request, _ context: ConsoleRequestContext, acting: Bool,
        _ body: (OperatorSession, [String: String]) async throws -> Response
    ) async throws -> Response {
        guard let session = try await session(token: ConsoleHTTP.cookie(self.sessionCookie, in: request)) else {
            return problem(.forbidden, "Signed out", "Sign in again; nothing was done.", session: nil)
        }
        let form = try await ConsoleHTTP.form(request, maxBytes: configuration.maxFormBytes)
        guard Self.tokensMatch(form["csrf"], session.csrfToken) else {
            try await audit(session, "csrfRefused", request.uri.path, context)
            return problem(.forbidden, "Refused", "This form did not come from your session of the console; nothing was done.", session: session)
        }
        guard !acting || session.role.mayAct else {
            try await audit(session, "actionRefused", request.uri.path, context)
            return problem(
                .forbidden, "Not allowed", "Your role (\(session.role.rawValue)) may read but not act; nothing was done.", session: session)
        }
        return try await body(session, form)
    }

    func audit(_ session: OperatorSession, _ action: String, _ detail: String, _ context: ConsoleRequestContext) async throws {
        try await store.recordAudit(
            operatorName: session.operatorName, action: action, detail: detail, address: context.address, nowMs: configuration.clock.nowMs)
    }

    func operatorsPage(_ session: OperatorSession, created: [String: String]?) async throws -> Response {
        let list = try await store.operators().map { o -> [String: Any] in
            [
                "name": o.name, "role": o.role.rawValue, "created": Self.time(o.createdAtMs), "csrf": session.csrfToken,
                // An admin does not remove or demote themselves here: the console would be left without one by a slip.
                "isSelf": o.name == session.operatorName,
            ]
        }
        var data: [String: Any] = ["operators": list, "csrf": session.csrfToken]
        if let created { data["created"] = created }
        return page("operators", title: "Operators", data, session: session)
    }

    /// An admin adds an operator (a random password and TOTP secret, shown once on the answer page), changes one's role
    /// or removes one; never their own.
    func addOperatorPosted(_ form: [String: String], _ session: OperatorSession, _ context: ConsoleRequestContext) async throws -> Response {
        if let action = form["action"], action != "add" {
            guard let name = form["name"].flatMap(OperatorRecord.normalized), name != session.operatorName else {
                return problem(.badRequest, "Not done", "no such operator (and not yourself)", session: session)
            }
            switch action {
            case "set-role":
                guard let role = form["role"].flatMap(OperatorRole.init(rawValue:)) else {
                    return problem(.badRequest, "Not done", "a role is viewer, support or admin", session: session)
                }
                guard try await store.setRole(name, role: role) else {
                    return problem(.notFound, "Not done", "no operator \(name)", session: session)
                }
                try await audit(session, "setRole", "\(name) (\(role.rawValue)); their sessions ended", context)
            case "remove":
                guard try await store.removeOperator(name) else { return problem(.notFound, "Not done", "no operator \(name)", session: session) }
                try await audit(session, "removeOperator", name, context)
            default:
                return problem(.badRequest, "Not done", "unknown action", session: session)
            }
            return try await operatorsPage(session, created: nil)
        }
        guard let name = form["name"].flatMap(OperatorRecord.normalized), let role = form["role"].flatMap(OperatorRole.init(rawValue:)) else {
            return problem(
                .badRequest, "Not done", "a name is 1-64 letters, digits, '.', '_', '-' or '@'; a role viewer, support or admin", session: session)
        }
        let created: (password: String, totpSecret: String)
        do {
            created = try await Self.addOperator(name, role: role, store: store, hasher: hasher, nowMs: configuration.clock.nowMs)
        } catch let error as OperatorExists {
            return problem(.conflict, "Not done", error.description, session: session)
        }
        try await audit(session, "addOperator", "\(name) (\(role.rawValue))", context)
        return try await operatorsPage(
            session, created: ["name": name, "role": role.rawValue, "password": created.password, "totpSecret": created.totpSecret])
    }

    func auditPage(_ request: Request, _ session: OperatorSession) async throws -> Response {
        let name = request.uri.queryParameters["operator"].map(String.init).flatMap { $0.isEmpty ? nil : $0.lowercased() }
        let action = request.uri.queryParameters["action"].map(String.init).flatMap { $0.isEmpty ? nil : $0 }
        let entries = try await store.audit(operatorName: name, action: action, limit: 500).map {
            ["when": Self.time($0.atMs), "operatorName": $0.operatorName, "action": $0.action, "detail": $0.detail, "address": $0.address ?? ""]
        }
        return page(
            "audit", title: "Audit", ["entries": entries, "operatorFilter": name ?? "", "actionFilter": action ?? ""], session: session)
    }

    static func time(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
