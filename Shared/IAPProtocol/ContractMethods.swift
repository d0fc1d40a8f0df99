import JSONRPC

/// Every method of the v1 contract, by service: what the CLI and the contract tests enumerate.
public enum ContractMethods {
    public static let accounts: [OpenRPCMethodDescription] = [
        .init(AccountsRegister.self), .init(AccountsLogin.self), .init(AccountsLogout.self),
        .init(AccountsAuthenticate.self), .init(AccountsChangePassword.self), .init(AccountsListSessions.self),
        .init(AccountsFindByAppAccountToken.self), .init(AccountsFindByUsername.self), .init(AccountsSetConsumptionConsent.self),
        .init(AccountsConsumptionProfile.self), .init(AccountsLinkAppTransaction.self), .init(AccountsAppleCustomer.self),
        .init(AccountsGetAccount.self), .init(AccountsRevokeSessions.self),
    ]
    public static let catalog: [OpenRPCMethodDescription] = [
        .init(CatalogListProducts.self), .init(CatalogGetProducts.self), .init(CatalogUpsertProduct.self),
        .init(CatalogSetPrices.self), .init(CatalogRetireProduct.self), .init(CatalogImportCatalog.self),
        .init(CatalogSetOffers.self), .init(CatalogSetRetention.self), .init(CatalogGetRetention.self),
    ]
    public static let verification: [OpenRPCMethodDescription] = [
        .init(VerificationVerifyReceipt.self), .init(VerificationVerifyTransaction.self),
        .init(VerificationVerifyNotification.self), .init(VerificationTransactionInfo.self), .init(VerificationTransactionHistory.self),
        .init(VerificationLookUpOrder.self), .init(VerificationSubscriptionStatuses.self), .init(VerificationRefundHistory.self),
        .init(VerificationNotificationHistory.self), .init(VerificationRequestTestNotification.self),
        .init(VerificationTestNotificationStatus.self), .init(VerificationSendConsumption.self), .init(VerificationSetAppAccountToken.self),
        .init(VerificationExtendRenewalDate.self), .init(VerificationFinishTransaction.self), .init(VerificationVerifyAppTransaction.self),
        .init(VerificationAppTransactionInfo.self), .init(VerificationMassExtendRenewalDate.self), .init(VerificationMassExtensionStatus.self),
        .init(VerificationVerifyRealtimeRequest.self), .init(VerificationVerifyPlayPurchase.self), .init(VerificationAcknowledgePlayPurchase.self),
        .init(VerificationVerifyPlayPush.self), .init(VerificationPlayVoidedPurchases.self),
    ]
    public static let fulfillment: [OpenRPCMethodDescription] = [
        .init(FulfillmentRedeem.self), .init(FulfillmentRestore.self), .init(FulfillmentGetEntitlements.self),
        .init(FulfillmentOfferEligibility.self), .init(FulfillmentSignOffer.self),
        .init(FulfillmentGetBalance.self), .init(FulfillmentSpendCoins.self), .init(FulfillmentListLedger.self),
        .init(FulfillmentListContent.self), .init(FulfillmentReadContent.self), .init(FulfillmentContentURL.self),
        .init(FulfillmentApplyNotification.self), .init(FulfillmentReceiveNotification.self), .init(FulfillmentReceivePlayNotification.self),
        .init(FulfillmentListNotifications.self),
        .init(FulfillmentListOutbox.self),
        .init(FulfillmentRetryNotification.self), .init(FulfillmentRevokeTransaction.self), .init(FulfillmentLookUpOrder.self),
        .init(FulfillmentListAudit.self), .init(FulfillmentGrantOrder.self), .init(FulfillmentExtendSubscription.self),
        .init(FulfillmentReconcile.self), .init(FulfillmentExtendAllSubscriptions.self), .init(FulfillmentMassExtensionStatus.self),
        .init(FulfillmentListEvents.self), .init(FulfillmentAddWebhook.self), .init(FulfillmentRotateWebhookSecret.self),
        .init(FulfillmentListWebhooks.self), .init(FulfillmentPauseWebhook.self), .init(FulfillmentDeleteWebhook.self),
        .init(FulfillmentRedeliverWebhook.self), .init(FulfillmentListDeliveries.self),
        .init(FulfillmentGetCustomer.self), .init(FulfillmentAdjustCoins.self), .init(FulfillmentGetOverview.self),
        .init(FulfillmentSignOutCustomer.self), .init(FulfillmentDismissNotification.self), .init(FulfillmentRetentionMessage.self),
    ]
    public static let simulator: [OpenRPCMethodDescription] = [
        .init(SimTrustAnchor.self), .init(SimPurchase.self), .init(SimFinishTransaction.self), .init(SimRestore.self),
        .init(SimRefund.self), .init(SimAdvanceClock.self), .init(SimReceipt.self), .init(SimSetFault.self),
        .init(SimAPIKey.self), .init(SimSetNotificationURL.self), .init(SimDeliverNotifications.self), .init(SimSetAutoRenew.self),
        .init(SimConsumptionReports.self), .init(SimSetNotificationFault.self), .init(SimBilling.self), .init(SimRefundDecision.self),
        .init(SimLifecycleEvent.self), .init(SimNotify.self), .init(SimOfferKey.self), .init(SimRevokeCertificate.self),
        .init(SimServerFinishes.self), .init(SimAppTransaction.self), .init(SimSetRealtimeURL.self), .init(SimCancelIntent.self),
        .init(SimReviewMessaging.self), .init(SimShareWithFamily.self),
    ]
    public static let playSimulator: [OpenRPCMethodDescription] = [
        .init(PlayServiceAccountKey.self), .init(PlayPurchaseProduct.self), .init(PlayGetPurchase.self), .init(PlaySubscriptionEvent.self),
        .init(PlayRefund.self), .init(PlayAdvanceClock.self), .init(PlaySetPushEndpoint.self), .init(PlaySetPushFault.self),
        .init(PlayDeliverNotifications.self), .init(PlaySetFault.self),
    ]
    public static let builtin: [OpenRPCMethodDescription] = [
        .init(RPCPing.self), .init(RPCDiscover.self), .init(HealthCheck.self),
    ]

    public static var all: [OpenRPCMethodDescription] { accounts + catalog + verification + fulfillment + simulator + playSimulator }

    /// What the public edge forwards: each `public` method of accounts, catalog and fulfillment, by name,
    /// with the service that serves it. Admin and internal methods (and verification, and the simulator)
    /// do not exist there.
    public static var publicAtTheEdge: [String: String] {
        var out: [String: String] = [:]
        for (service, methods) in [("accounts", accounts), ("catalog", catalog), ("fulfillment", fulfillment)] {
            for m in methods where m.access == .public { out[m.name] = service }
        }
        return out
    }
}
