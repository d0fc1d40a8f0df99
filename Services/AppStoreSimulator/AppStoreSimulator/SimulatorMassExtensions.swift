import Foundation
import GRDB
import Hummingbird
import IAPProtocol
import NIOPosix

/// Extend Subscription Renewal Dates for All Active Subscribers and Get Status of Subscription Renewal Date Extensions
/// (App Store Server API), as Apple documents them: the request is accepted at once (200 `{requestIdentifier}`; the
/// same identifier again answers the same), and carried out afterwards, each eligible subscription extended once with
/// a RENEWAL_EXTENDED notification, each that cannot be (extended twice already) a RENEWAL_EXTENSION / FAILURE, and at
/// the end one RENEWAL_EXTENSION / SUMMARY with the counts. Eligible: the product's subscriptions active now (not
/// expired, not in billing retry past grace), in the storefronts named (the simulator's customers are all in USA).
extension AppStoreServerAPIEndpoint {
    func addMassExtensionRoutes(to router: Router<BasicRequestContext>, prefix: String, environment: SimEnvironment) {
        router.post(RouterPath("\(prefix)inApps/v1/subscriptions/extend/mass")) { request, _ -> Response in
            await self.respond(request) { bid, body in try self.massExtend(body: body, environment: environment, bid: bid) }
        }
        router.get(RouterPath("\(prefix)inApps/v1/subscriptions/extend/mass/:productId/:requestIdentifier")) { request, context -> Response in
            await self.respond(request) { bid in
                try self.massExtensionStatus(
                    productId: context.parameters.get("productId") ?? "", requestIdentifier: context.parameters.get("requestIdentifier") ?? "",
                    environment: environment, bid: bid)
            }
        }
    }

    static func requestIdentifier(_ value: Any?) throws -> String {
        guard let id = value as? String, id.count <= 128, UUID(uuidString: id) != nil else {
            throw APIError.badRequest(4_000_011, "Invalid request identifier.")
        }
        return id
    }

    func massExtend(body: [UInt8], environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let object = try Self.object(body)
        let requestIdentifier = try Self.requestIdentifier(object["requestIdentifier"])
        let (days, reason) = try Self.extensionTerms(object)
        guard let productId = object["productId"] as? String, !productId.isEmpty else {
            throw APIError.badRequest(4_000_023, "Invalid request. The product id parameter is invalid.")
        }
        var storefronts: [String]?
        if let value = object["storefrontCountryCodes"] {
            guard let codes = value as? [Any], !codes.isEmpty else {
                throw APIError.badRequest(
                    4_000_027, "Invalid request. If provided, the list of storefront country codes must not be empty.")
            }
            storefronts = try codes.map { code in
                guard let code = code as? String, code.count == 3, code.allSatisfy({ $0.isASCII && $0.isUppercase }) else {
                    throw APIError.badRequest(4_000_028, "Invalid request. A storefront country code was invalid.")
                }
                return code
            }
        }
        try simulator.api.apiRecordMassExtension(
            .init(
                requestIdentifier: requestIdentifier, bundleId: bid, environment: environment, productId: productId, days: days,
                reasonCode: reason, storefronts: storefronts))
        // Carried out after the answer, as Apple's is (`sim.deliverNotifications` also completes what is pending).
        let api = simulator.api
        NIOThreadPool.singleton.submit { _ in
            _ = try? api.completeMassExtensions()
            api.courier.kick()
        }
        return ["requestIdentifier": requestIdentifier]
    }

    func massExtensionStatus(productId: String, requestIdentifier: String, environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let requestIdentifier = try Self.requestIdentifier(requestIdentifier)
        guard !productId.isEmpty else { throw APIError.badRequest(4_000_023, "Invalid request. The product id parameter is invalid.") }
        guard let job = try simulator.api.apiMassExtension(requestIdentifier, bundleId: bid, environment: environment), job.productId == productId
        else {
            throw APIError(
                status: .notFound, code: 4_040_009,
                message:
                    "The server didn't find a subscription-renewal-date extension request for this requestIdentifier and productId combination.")
        }
        var answer: [String: Any] = ["requestIdentifier": requestIdentifier, "complete": job.completeDateMs != nil]
        if let done = job.completeDateMs {
            answer["completeDate"] = done
            answer["succeededCount"] = job.succeeded
            answer["failedCount"] = job.failed
        }
        return answer
    }
}

extension AppStoreSimulator {
    /// Carries out the mass extensions still pending now (tests; `sim.deliverNotifications` does it too). Blocking.
    @discardableResult
    public func completeMassExtensions() throws -> Int { try api.completeMassExtensions() }
}

/// One mass extension request as the simulator keeps it.
struct SimMassExtension: Sendable {
    var requestIdentifier: String
    var bundleId: String
    var environment: SimEnvironment
    var productId: String
    var days: Int
    var reasonCode: Int
    var storefronts: [String]?
    var completeDateMs: Int64? = nil
    var succeeded = 0
    var failed = 0
}

extension SimulatorServerAPIBackend {
    /// Records the request unless its identifier is known for this app and environment (then it stands as it was).
    func apiRecordMassExtension(_ job: SimMassExtension) throws {
        try store.writer.write { db in
            try db.execute(
                sql: """
                    INSERT INTO simMassExtension (requestIdentifier, bundleId, environment, productId, days, reasonCode, storefronts)
                    VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (requestIdentifier, bundleId, environment) DO NOTHING
                    """,
                arguments: [
                    job.requestIdentifier, job.bundleId, job.environment.rawValue, job.productId, job.days, job.reasonCode,
                    job.storefronts?.joined(separator: ","),
                ])
        }
    }

    func apiMassExtension(_ requestIdentifier: String, bundleId: String, environment: SimEnvironment) throws -> SimMassExtension? {
        try store.writer.read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM simMassExtension WHERE requestIdentifier = ? AND bundleId = ? AND environment = ?",
                arguments: [requestIdentifier, bundleId, environment.rawValue]
            ).map(Self.massExtension)
        }
    }

    /// Carries out every pending request, each in one transaction (so a request is never carried out twice); answers how
    /// many were completed.
    @discardableResult
    func completeMassExtensions() throws -> Int {
        let pending = try store.writer.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM simMassExtension WHERE completeDateMs IS NULL").map(Self.massExtension)
        }
        var failure: (any Error)?
        for job in pending {
            do { try store.writer.write { db in try self.complete(job, db: db) } } catch { failure = failure ?? error }
        }
        if let failure { throw failure }
        return pending.count
    }

    private func complete(_ job: SimMassExtension, db: Database) throws {
        guard
            try Bool.fetchOne(
                db, sql: "SELECT completeDateMs IS NULL FROM simMassExtension WHERE requestIdentifier = ? AND bundleId = ? AND environment = ?",
                arguments: [job.requestIdentifier, job.bundleId, job.environment.rawValue]) == true
        else { return }
        let now = try simulator.now(db)
        var succeeded = 0
        var failed = 0
        let inStorefront = job.storefronts.map { $0.contains("USA") } ?? true
        let originals = Set(
            try SimulatorStore.allAutoRenewables(db).filter { $0.bundleId == job.bundleId && $0.environment == job.environment }
                .map(\.originalTransactionId))
        for original in originals.sorted() where inStorefront {
            guard let latest = try SimulatorStore.latestPeriod(original, db: db), latest.productId == job.productId else { continue }
            switch try extend(original, days: job.days, db: db) {
            case .extended: succeeded += 1
            case .ineligible: continue
            case .maxExtensions:
                failed += 1
                try simulator.recordNotification("RENEWAL_EXTENSION", subtype: "FAILURE", latest, signedDate: now, db: db)
            }
        }
        var summary: [String: Any] = [
            "requestIdentifier": job.requestIdentifier, "environment": job.environment.appleName, "bundleId": job.bundleId,
            "productId": job.productId, "succeededCount": succeeded, "failedCount": failed,
        ]
        if job.environment == .production { summary["appAppleId"] = 1_234_567_890 }
        if let storefronts = job.storefronts { summary["storefrontCountryCodes"] = storefronts }
        _ = try simulator.recordNotification(
            "RENEWAL_EXTENSION", subtype: "SUMMARY", bundleId: job.bundleId, environment: job.environment, section: "summary", data: summary,
            transaction: nil, signedDate: now, db: db)
        try db.execute(
            sql: """
                UPDATE simMassExtension SET completeDateMs = ?, succeeded = ?, failed = ?
                WHERE requestIdentifier = ? AND bundleId = ? AND environment = ?
                """, arguments: [now, succeeded, failed, job.requestIdentifier, job.bundleId, job.environment.rawValue])
    }

    private static func massExtension(_ r: Row) -> SimMassExtension {
        SimMassExtension(
            requestIdentifier: r["requestIdentifier"], bundleId: r["bundleId"], environment: SimEnvironment(rawValue: r["environment"]) ?? .sandbox,
            productId: r["productId"], days: r["days"], reasonCode: r["reasonCode"],
            storefronts: (r["storefronts"] as String?).map { $0.split(separator: ",").map(String.init) }, completeDateMs: r["completeDateMs"],
            succeeded: r["succeeded"], failed: r["failed"])
    }
}
